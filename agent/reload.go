package agent

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/aitherion/dpu/noc/port/secure"
)

// Reload applies what of next can change while the agent runs and names
// the rest. Live: metrics-listen (the server moves, or stops when empty),
// log-level (the caller owns the logger: it applies it when Reload lists
// it) and, with link security on, the fabric-keys file, read again on
// every reload (its path may stay the same while its keys change): a
// removed key ends its link sessions at once and is refused from then
// on, and each added and removed key is logged. Every other key that differs from the running configuration
// is listed in restart: it takes effect only when the agent starts again.
// GPU limits of running processes change live through the control socket
// (dpuctl gpu set); the configured defaults need a restart.
func (a *Agent) Reload(next Config) (applied, restart []string, err error) {
	if err := next.Validate(); err != nil {
		return nil, nil, err
	}
	cur := a.cfg
	m := &a.metrics
	m.mu.Lock()
	if next.MetricsListen != m.listen {
		if err := a.listenMetricsLocked(next.MetricsListen); err != nil {
			m.mu.Unlock()
			return nil, nil, err
		}
		applied = append(applied, "metrics-listen")
	}
	m.mu.Unlock()
	if next.LogLevel != cur.LogLevel {
		applied = append(applied, "log-level")
	}
	if a.keys != nil && next.KeyFile == cur.KeyFile && next.FabricKeys != "" {
		changed, err := a.reloadFabricKeys(next.FabricKeys)
		if err != nil {
			return applied, nil, err
		}
		if changed {
			applied = append(applied, "fabric-keys")
		}
	}
	if next.Seed == 0 {
		next.Seed = cur.Seed // 0 draws one at start: not a change
	}
	for key, differs := range map[string]bool{
		"node":                  next.Node != cur.Node,
		"run-dir":               next.RunDir != cur.RunDir,
		"port":                  !reflect.DeepEqual(next.Ports, cur.Ports) && (len(next.Ports) > 0 || len(cur.Ports) > 0),
		"loop":                  next.Loop != cur.Loop,
		"spin":                  next.Spin != cur.Spin,
		"heartbeat":             next.Heartbeat != cur.Heartbeat,
		"dead-interval":         next.DeadInterval != cur.DeadInterval,
		"socket-group":          next.SocketGroup != cur.SocketGroup,
		"pages":                 next.Pages != cur.Pages,
		"tier":                  !slices.Equal(next.Tiers, cur.Tiers),
		"seed":                  next.Seed != cur.Seed,
		"request-timeout":       next.RequestTimeout != cur.RequestTimeout,
		"pin-bound":             next.PinBound != cur.PinBound,
		"replicas":              next.Replicas != cur.Replicas,
		"fabric-nodes":          next.FabricNodes != cur.FabricNodes,
		"xdp-pin-dir":           next.XDPPinDir != cur.XDPPinDir,
		"gpu-*":                 next.GPU.Default != cur.GPU.Default || !maps.Equal(next.GPU.Devices, cur.GPU.Devices),
		"key-file":              next.KeyFile != cur.KeyFile,
		"metrics-gpu-processes": next.MetricsGPUProcesses != cur.MetricsGPUProcesses,
	} {
		if differs {
			restart = append(restart, key)
		}
	}
	slices.Sort(restart)
	a.cfg.LogLevel = next.LogLevel
	return applied, restart, nil
}

// reloadFabricKeys reads the fabric key list at path into the list every
// secure port shares, logs the keys added and removed, and ends the
// sessions of neighbours whose key is gone. It reports whether the list
// changed. A list that cannot be read changes nothing.
func (a *Agent) reloadFabricKeys(path string) (bool, error) {
	next, err := secure.LoadFabric(path)
	if err != nil {
		return false, fmt.Errorf("agent: fabric-keys not reloaded: %w", err)
	}
	added, removed := a.keys.fabric.Replace(next)
	a.warnUnbound(next)
	for _, k := range added {
		a.log.Info("fabric key added", "name", k.Name, "key", k.Key.String())
	}
	for _, k := range removed {
		a.log.Warn("fabric key removed: its node is refused from now on", "name", k.Name, "key", k.Key.String())
	}
	if len(removed) > 0 {
		changed := make([]secure.PublicKey, len(removed))
		for i, k := range removed {
			changed[i] = k.Key
		}
		for i := range a.ports {
			sp, ok := under[*secure.Port](a.ports[i].port)
			if !ok {
				continue
			}
			if k, ok := sp.Revoke(changed...); ok {
				a.log.Warn("link session ended: the neighbour's key was removed or rebound", "port", a.ports[i].spec.Name, "key", k.String())
			}
		}
	}
	return len(added)+len(removed) > 0, nil
}
