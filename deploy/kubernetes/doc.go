// Package kubernetes holds the Kubernetes manifests of dpu-agent
// (dpu-agent.yaml: a namespace, the per-node configuration and the
// DaemonSet). It has no code: its test decodes every document strictly
// into the Kubernetes API's own types (an unknown or misspelt field, or a
// value of the wrong type, fails) and checks what the agent needs of them.
package kubernetes
