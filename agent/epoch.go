package agent

import (
	cryptorand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/internal/rundir"
)

// epochFile holds the last allocation epoch a run of this agent used
// (coherence.Config.AllocEpoch), in the state directory.
const epochFile = "alloc-epoch"

// nextAllocEpoch takes this run's allocation epoch: one more than the
// epoch recorded in dir, recorded (and synced) before it is used, so that
// no later run can take it again and no GVA is handed out twice. The file
// is trusted only when owned by the agent's user and writable by no one
// else; dir is the state directory as opened (rundir.OpenDir), name the
// path it was opened by (errors name the file by it: dir is a descriptor's
// /proc path).
func nextAllocEpoch(dir, name string) (uint32, error) {
	path := filepath.Join(dir, epochFile)
	shown := filepath.Join(name, epochFile)
	var last uint64
	b, err := rundir.ReadTrusted(path, os.Geteuid(), 64)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, fmt.Errorf("agent: allocation epoch %s: %w", shown, err)
	default:
		last, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("agent: allocation epoch %s: %w", shown, err)
		}
	}
	if last >= coherence.MaxAllocEpoch {
		return 0, fmt.Errorf("agent: allocation epochs of %s exhausted (%d runs)", shown, last)
	}
	next := uint32(last + 1)
	if err := rundir.WriteFile(path, []byte(strconv.FormatUint(uint64(next), 10)+"\n"), 0o600, -1, -1); err != nil {
		return 0, fmt.Errorf("agent: allocation epoch %s: %w", shown, err)
	}
	return next, nil
}

// bootNonce is a value no other run of this agent has: mixed into the
// core's seed (node.Config.Boot), it keeps a restart with the same
// configured seed from reusing a link session id.
func bootNonce() uint64 {
	var b [8]byte
	if _, err := cryptorand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}
