package agent

import (
	"fmt"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/secure"
)

// linkKeys are the node's static key pair and the fabric's key list.
type linkKeys struct {
	static secure.KeyPair
	fabric *secure.Fabric

	// refusals: the (port, key, claimed id) last refused on each port,
	// logged once (the core's loop only)
	refusals map[noc.PortID]refusal
}

type refusal struct {
	key     secure.PublicKey
	claimed noc.NodeID
}

// loadKeys reads key-file and fabric-keys when configured.
func (a *Agent) loadKeys() error {
	if a.cfg.KeyFile == "" {
		if len(a.cfg.Ports) > 0 {
			a.log.Warn("links are plaintext: not authenticated, not encrypted; anyone who reaches a port can read and forge its frames (set key-file and fabric-keys: SECURITY.md)",
				"ports", len(a.cfg.Ports))
		}
		return nil
	}
	kp, err := secure.LoadKeyFile(a.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	fab, err := secure.LoadFabric(a.cfg.FabricKeys)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if _, ok := fab.Lookup(kp.Public); !ok {
		a.log.Warn("this node's own key is not in the fabric key list", "key", kp.Public.String(), "fabric_keys", a.cfg.FabricKeys)
	} else if n, bound := fab.Node(kp.Public); bound && noc.NodeID(n) != a.cfg.Node {
		return fmt.Errorf("agent: fabric-keys %s binds this node's key to node %d, not node %d", a.cfg.FabricKeys, n, a.cfg.Node)
	}
	a.warnUnbound(fab)
	a.keys = &linkKeys{static: kp, fabric: fab, refusals: map[noc.PortID]refusal{}}
	a.log.Info("link security on", "key", kp.Public.String(), "fabric_keys", fab.Len())
	return nil
}

// warnUnbound says which keys of the list are bound to no node id.
func (a *Agent) warnUnbound(fab *secure.Fabric) {
	if names := fab.Unbound(); len(names) > 0 {
		a.log.Warn("fabric keys bound to no node id: their holders may claim any node id (add node=ID to each line: SECURITY.md)",
			"keys", names, "fabric_keys", a.cfg.FabricKeys)
	}
}

// admitNeighbour is the core's node.Config.AdmitNeighbour: on a port with
// link security, a hello's node id must be the one fabric-keys binds the
// neighbour's proven key to. The first refusal of each (port, key, id) is
// logged.
func (a *Agent) admitNeighbour(p noc.PortID, claimed noc.NodeID) bool {
	if a.keys == nil || int(p) >= len(a.ports) {
		return true
	}
	sp, ok := under[*secure.Port](a.ports[p].port)
	if !ok {
		return true
	}
	k, ok := sp.Peer()
	if !ok {
		return false // no session: nothing can have come through it
	}
	n, bound := a.keys.fabric.Node(k)
	if !bound || noc.NodeID(n) == claimed {
		delete(a.keys.refusals, p)
		return true
	}
	if r, seen := a.keys.refusals[p]; !seen || r != (refusal{k, claimed}) {
		a.keys.refusals[p] = refusal{k, claimed}
		name, _ := a.keys.fabric.Lookup(k)
		a.log.Warn("neighbour refused: it claims a node id its key is not bound to", "port", a.ports[p].spec.Name,
			"claims", claimed, "key", k.String(), "key_name", name, "bound_to", n)
	}
	return false
}

// secure wraps p in a secure link when link security is configured.
func (a *Agent) secure(p noc.Port) (noc.Port, error) {
	if a.keys == nil {
		return p, nil
	}
	sp, err := secure.New(p, secure.Config{Static: a.keys.static, Fabric: a.keys.fabric})
	if err != nil {
		p.Close()
		return nil, err
	}
	return sp, nil
}

// peerKey is the proven identity of the neighbour on port id ("" without
// link security or before a handshake).
func (a *Agent) peerKey(id noc.PortID) (key, name string) {
	if int(id) >= len(a.ports) {
		return "", ""
	}
	sp, ok := under[*secure.Port](a.ports[id].port)
	if !ok {
		return "", ""
	}
	k, ok := sp.Peer()
	if !ok {
		return "", ""
	}
	name, _ = sp.PeerName()
	return k.String(), name
}
