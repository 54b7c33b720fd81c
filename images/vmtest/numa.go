package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// numaScenario boots one amd64 guest with two NUMA nodes, its NIC on node
// 1, and the agent on that NIC with the default numa = auto. On the
// console it asks the agent where it runs (dpuctl numa show, and its
// JSON), makes the agent write a page, and reads the kernel's own account
// of the agent's threads and memory (/proc/PID/status, numa_maps): the
// agent must be bound to node 1 (address 3:1), every one of its threads
// allowed only node 1's CPU, and its page memory preferred on node 1 with
// the written page there.
func numaScenario() scenario {
	return scenario{
		Name: "numa",
		Guests: []guestSpec{{
			Name: "node3", Node: 3, Append: []string{"dpu.node=3", "dpu.links=eth0"},
			// the NIC's network goes nowhere (a restricted user network)
			Netdev: "user,id=n0,restrict=on", MAC: "52:54:00:d9:00:31",
			TwoNUMANodes: true,
			Shell: []string{
				"cat /sys/devices/system/node/node1/cpulist /sys/class/net/eth0/device/numa_node",
				"dpuctl numa show",
				"echo DPU-TEST OUT numa: $(dpuctl -j numa show)",
				"G=$(dpuctl mem alloc)",
				"dpuctl mem add $G 5",
				// one line: a line typed while a long output prints can be lost
				"cat /proc/[0-9]*/numa_maps /proc/[0-9]*/status; echo DPU-TEST END numa ok; echo DPU-TEST DONE ok; shutdown",
			},
		}},
		Checks:     []string{"numa"},
		WithOutput: []string{"numa"},
		Verify:     verifyNUMA,
	}
}

func verifyNUMA(gs []*guest) ([]string, error) {
	c := gs[0].console
	out, _ := c.Check("numa")
	if len(out) != 1 {
		return nil, fmt.Errorf("dpuctl -j numa show printed %d lines", len(out))
	}
	var n struct {
		Setting, Address, CPUs string
		Bound                  int
		PageMemory             uint64 `json:"page_memory"`
		Nodes                  []struct {
			ID   int
			CPUs string
			NICs []string
		}
	}
	if err := json.Unmarshal([]byte(out[0]), &n); err != nil {
		return nil, fmt.Errorf("dpuctl -j numa show: %w: %q", err, out[0])
	}
	if len(n.Nodes) != 2 {
		return nil, fmt.Errorf("the agent found %d NUMA nodes, want 2: %s", len(n.Nodes), out[0])
	}
	if n.Setting != "auto" || n.Bound != 1 || n.Address != "3:1" || n.CPUs != n.Nodes[1].CPUs {
		return nil, fmt.Errorf("the agent is not bound to node 1 (its NIC's): %s", out[0])
	}
	if len(n.Nodes[1].NICs) == 0 || n.Nodes[1].NICs[0] != "eth0" {
		return nil, fmt.Errorf("eth0 is not on node 1: %s", out[0])
	}
	text := c.Text()
	// every thread of the agent may run on node 1's CPU only
	agentStatus := regexp.MustCompile(`(?s)Name:\s+dpu-agent\n.*?Cpus_allowed_list:\s+(\S+)`).FindAllStringSubmatch(text, -1)
	if len(agentStatus) == 0 {
		return nil, errors.New("no /proc status of dpu-agent on the console")
	}
	for _, m := range agentStatus {
		if m[1] != n.Nodes[1].CPUs {
			return nil, fmt.Errorf("dpu-agent's Cpus_allowed_list is %s, want node 1's %s", m[1], n.Nodes[1].CPUs)
		}
	}
	// the page memory: one mapping preferred on node 1, its touched pages there
	var arena string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "prefer:1") {
			arena = strings.TrimSpace(l)
			break
		}
	}
	if arena == "" {
		return nil, errors.New("no memory of the agent's preferred on node 1 in numa_maps")
	}
	if !strings.Contains(arena, "N1=") || strings.Contains(arena, "N0=") {
		return nil, fmt.Errorf("the agent's page memory is not on node 1: %s", arena)
	}
	return []string{
		"node3: dpuctl -j numa show: " + out[0],
		fmt.Sprintf("node3: dpu-agent's Cpus_allowed_list %s (node 1's CPUs)", agentStatus[0][1]),
		"node3: page memory in numa_maps: " + arena,
	}, nil
}
