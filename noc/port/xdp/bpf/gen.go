package bpf

// The object is compiled for little-endian BPF only: amd64 and arm64, the
// two architectures the agent ships for. generate.sh sets the C flags.
//go:generate go tool bpf2go -tags linux -target bpfel -type fault_config noc noc.c
