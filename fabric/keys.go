package fabric

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc/port/secure"
)

// fabricKeysFile is the fabric's public key list, in the fabric directory.
const fabricKeysFile = "fabric.keys"

// writeKeys gives every node a fresh static key pair (DIR/nodeN/node.key,
// mode 0600: only the agents' user reads it, and agent.conf, which others
// may read, only names it) and writes the list of their public keys
// (DIR/fabric.keys), each bound to its node id (node i is id i). It
// returns node i's configuration lines.
func writeKeys(dir string, nodes int) (func(i int) string, error) {
	fab := secure.NewFabric()
	var order []secure.PublicKey
	for i := range nodes {
		rd := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(rd, 0o755); err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		kp, err := secure.GenerateKeyPair()
		if err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		if err := secure.WriteKeyFile(filepath.Join(rd, "node.key"), kp, -1, -1); err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		fab.AddNode(fmt.Sprintf("node%d", i), kp.Public, uint32(i))
		order = append(order, kp.Public)
	}
	list := filepath.Join(dir, fabricKeysFile)
	if err := writeFile(list, fab.Format(order)); err != nil {
		return nil, err
	}
	return func(i int) string {
		return fmt.Sprintf("key-file = %s\nfabric-keys = %s\n", filepath.Join(dir, fmt.Sprintf("node%d", i), "node.key"), list)
	}, nil
}

func writeFile(path string, b []byte) error {
	if err := rundir.WriteFile(path, b, 0o644, -1, -1); err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	return nil
}
