package ctl

import (
	"context"
	"fmt"
	"strconv"

	"github.com/mdlayher/netlink"
)

// CmdNUMAGet dumps the host's NUMA layout and the agent's binding: one
// NUMA message.
const CmdNUMAGet Cmd = 25

// NUMA is the host's NUMA nodes as the agent found them and where the
// agent runs: Bound is the node its CPUs and page memory are bound to (-1:
// none, with Reason), Address that node as a fabric address
// ("server:numa", the node id then the NUMA node), CPUs the agent's CPU
// affinity and PageMemory the bytes of page memory placed on Bound.
type NUMA struct {
	Server     uint32     `json:"server"`
	Setting    string     `json:"setting"` // auto, off or a node id
	Bound      int32      `json:"bound"`
	Address    string     `json:"address,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	CPUs       string     `json:"cpus,omitempty"`
	PageMemory uint64     `json:"page_memory"`
	Nodes      []NUMANode `json:"nodes"`
	// OtherNICs are the network devices without a node (virtual ones, or
	// a bus without affinity).
	OtherNICs []string `json:"nics_without_node,omitempty"`
	// Error is why the layout could not be read (Nodes is then empty).
	Error string `json:"error,omitempty"`
}

// NUMANode is one NUMA node: its CPUs (a kernel CPU list), memory in
// bytes, and the network devices on it.
type NUMANode struct {
	ID       uint32   `json:"id"`
	CPUs     string   `json:"cpus"`
	MemTotal uint64   `json:"mem_total"`
	MemFree  uint64   `json:"mem_free"`
	NICs     []string `json:"nics"`
}

// NUMAAddress is the fabric address of NUMA node numa of node server.
func NUMAAddress(server uint32, numa int32) string {
	return strconv.FormatUint(uint64(server), 10) + ":" + strconv.FormatInt(int64(numa), 10)
}

// NUMA attributes.
const (
	attrNUMAServer     = 1  // u32
	attrNUMASetting    = 2  // string
	attrNUMABound      = 3  // s32
	attrNUMAReason     = 4  // string
	attrNUMACPUs       = 5  // string
	attrNUMAPageMemory = 6  // u64
	attrNUMANodes      = 7  // nested: attrNUMANode entries
	attrNUMAOtherNICs  = 8  // nested: attrNUMANIC strings
	attrNUMAError      = 9  // string
	attrNUMAAddress    = 10 // string

	attrNUMANode = 1 // nested node, in attrNUMANodes
	attrNUMANIC  = 1 // string, in a NIC list

	attrNodeID       = 1 // u32
	attrNodeCPUs     = 2 // string
	attrNodeMemTotal = 3 // u64
	attrNodeMemFree  = 4 // u64
	attrNodeNICs     = 5 // nested: attrNUMANIC strings
)

// EncodeAttrs implements Object.
func (n *NUMA) EncodeAttrs(ae *netlink.AttributeEncoder) {
	ae.Uint32(attrNUMAServer, n.Server)
	ae.String(attrNUMASetting, n.Setting)
	ae.Int32(attrNUMABound, n.Bound)
	optString(ae, attrNUMAAddress, n.Address)
	optString(ae, attrNUMAReason, n.Reason)
	optString(ae, attrNUMACPUs, n.CPUs)
	ae.Uint64(attrNUMAPageMemory, n.PageMemory)
	optString(ae, attrNUMAError, n.Error)
	ae.Nested(attrNUMANodes, func(nae *netlink.AttributeEncoder) error {
		for _, nd := range n.Nodes {
			nae.Nested(attrNUMANode, func(dae *netlink.AttributeEncoder) error {
				dae.Uint32(attrNodeID, nd.ID)
				dae.String(attrNodeCPUs, nd.CPUs)
				dae.Uint64(attrNodeMemTotal, nd.MemTotal)
				dae.Uint64(attrNodeMemFree, nd.MemFree)
				encodeNames(dae, attrNodeNICs, nd.NICs)
				return nil
			})
		}
		return nil
	})
	encodeNames(ae, attrNUMAOtherNICs, n.OtherNICs)
}

// DecodeAttrs implements Object.
func (n *NUMA) DecodeAttrs(ad *netlink.AttributeDecoder) error {
	n.Bound = -1
	for ad.Next() {
		switch ad.Type() {
		case attrNUMAServer:
			n.Server = ad.Uint32()
		case attrNUMASetting:
			n.Setting = ad.String()
		case attrNUMABound:
			n.Bound = ad.Int32()
		case attrNUMAAddress:
			n.Address = ad.String()
		case attrNUMAReason:
			n.Reason = ad.String()
		case attrNUMACPUs:
			n.CPUs = ad.String()
		case attrNUMAPageMemory:
			n.PageMemory = ad.Uint64()
		case attrNUMAError:
			n.Error = ad.String()
		case attrNUMAOtherNICs:
			n.OtherNICs = decodeNames(ad)
		case attrNUMANodes:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() != attrNUMANode {
						continue
					}
					var nd NUMANode
					nad.Nested(func(dad *netlink.AttributeDecoder) error {
						for dad.Next() {
							switch dad.Type() {
							case attrNodeID:
								nd.ID = dad.Uint32()
							case attrNodeCPUs:
								nd.CPUs = dad.String()
							case attrNodeMemTotal:
								nd.MemTotal = dad.Uint64()
							case attrNodeMemFree:
								nd.MemFree = dad.Uint64()
							case attrNodeNICs:
								nd.NICs = decodeNames(dad)
							}
						}
						return nil
					})
					if nd.NICs == nil {
						nd.NICs = []string{} // JSON: a node without NICs lists none
					}
					n.Nodes = append(n.Nodes, nd)
				}
				return nil
			})
		}
	}
	return ad.Err()
}

func optString(ae *netlink.AttributeEncoder, typ uint16, v string) {
	if v != "" {
		ae.String(typ, v)
	}
}

func encodeNames(ae *netlink.AttributeEncoder, typ uint16, names []string) {
	if len(names) == 0 {
		return
	}
	ae.Nested(typ, func(nae *netlink.AttributeEncoder) error {
		for _, s := range names {
			nae.String(attrNUMANIC, s)
		}
		return nil
	})
}

func decodeNames(ad *netlink.AttributeDecoder) []string {
	var names []string
	ad.Nested(func(nad *netlink.AttributeDecoder) error {
		for nad.Next() {
			if nad.Type() == attrNUMANIC {
				names = append(names, nad.String())
			}
		}
		return nil
	})
	return names
}

// NUMAShow asks for the agent's NUMA layout and binding.
func (c *Client) NUMAShow(ctx context.Context) (NUMA, error) {
	all, err := Dump[NUMA](ctx, c, CmdNUMAGet)
	if err != nil {
		return NUMA{}, err
	}
	if len(all) != 1 {
		return NUMA{}, fmt.Errorf("ctl: numa: %d objects, want one", len(all))
	}
	return all[0], nil
}
