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
	}
	a.keys = &linkKeys{static: kp, fabric: fab}
	a.log.Info("link security on", "key", kp.Public.String(), "fabric_keys", fab.Len())
	return nil
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
