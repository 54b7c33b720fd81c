package kubernetes

import (
	"bytes"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aitherion/dpu/agent"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// documents splits a multi-document YAML file.
func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func TestManifest(t *testing.T) {
	var ds *appsv1.DaemonSet
	var cm *corev1.ConfigMap
	docs := documents(t, "dpu-agent.yaml")
	examples := documents(t, "dpu-agent-config.yaml")
	for i, d := range append(docs, examples...) {
		if i == len(docs) && cm != nil {
			t.Error("dpu-agent.yaml holds a ConfigMap: applying it would overwrite the nodes' configuration")
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(d, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "v1 Namespace":
			obj = &corev1.Namespace{}
		case "v1 ConfigMap":
			cm = &corev1.ConfigMap{}
			obj = cm
		case "apps/v1 DaemonSet":
			ds = &appsv1.DaemonSet{}
			obj = ds
		default:
			t.Fatalf("document %d: unexpected %s %s", i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(d, obj); err != nil {
			t.Errorf("document %d (%s): %v", i, head.Kind, err)
		}
	}
	if ds == nil || cm == nil {
		t.Fatal("no DaemonSet or ConfigMap")
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("the agent's ports are the node's netdevs: hostNetwork must be true")
	}
	if ds.Spec.Selector == nil || ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != ds.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Error("the selector does not match the pod template")
	}
	c := spec.Containers[0]
	var caps []string
	for _, cp := range c.SecurityContext.Capabilities.Add {
		caps = append(caps, string(cp))
	}
	for _, need := range []string{"BPF", "NET_ADMIN", "NET_RAW", "IPC_LOCK"} {
		if !slices.Contains(caps, need) {
			t.Errorf("capability %s missing (AF_XDP needs it)", need)
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	var runDir *corev1.HostPathVolumeSource
	for _, v := range spec.Volumes {
		if v.Name == "run-dir" {
			runDir = v.HostPath
		}
	}
	if runDir == nil || runDir.Path != "/run/dpu" || mounts["run-dir"] != "/run/dpu" {
		t.Errorf("the run directory must be the host's /run/dpu (hostPath), mounted at /run/dpu: %+v %v", runDir, mounts)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "--config /etc/dpu/$(NODE_NAME)") || mounts["config"] != "/etc/dpu" {
		t.Errorf("the agent reads its node's key of the ConfigMap: args %v mounts %v", c.Args, mounts)
	}
	for node, conf := range cm.Data {
		if !strings.Contains(conf, "run-dir = /run/dpu") {
			t.Errorf("config of %s: its run-dir is not the mounted /run/dpu", node)
		}
		c := agent.DefaultConfig()
		if err := c.Load("dpu-agent-config.yaml "+node, strings.NewReader(conf)); err != nil {
			t.Errorf("the example configuration does not load: %v", err)
		} else if err := c.Validate(); err != nil {
			t.Errorf("the example configuration is not valid: %v", err)
		} else if host, _, _ := net.SplitHostPort(c.MetricsListen); ds.Spec.Template.Annotations["prometheus.io/scrape"] == "true" &&
			(host == "" || net.ParseIP(host).IsLoopback()) {
			t.Errorf("config of %s: the pods ask a cluster Prometheus to scrape metrics the agent serves on loopback only (%q)", node, c.MetricsListen)
		}
	}
	var volume string
	for _, v := range spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			volume = v.ConfigMap.Name
		}
	}
	if volume != cm.Name {
		t.Errorf("the DaemonSet reads the ConfigMap %q, the example is %q", volume, cm.Name)
	}
	// The header's commands, in order, must work on an empty cluster: a
	// create of the ConfigMap, then an apply of this file that neither
	// fails on it nor overwrites it.
	b, err := os.ReadFile("dpu-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	header := string(b[:bytes.Index(b, []byte("\napiVersion:"))])
	create := strings.Index(header, "kubectl -n dpu create configmap "+cm.Name)
	apply := strings.Index(header, "kubectl apply -f deploy/kubernetes/dpu-agent.yaml")
	if create < 0 || apply < 0 || create > apply {
		t.Errorf("the header does not create the ConfigMap %s before applying the manifest:\n%s", cm.Name, header)
	}
}
