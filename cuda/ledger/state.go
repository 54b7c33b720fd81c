package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/aitherion/dpu/internal/rundir"
)

// The state file keeps the limits set at run time across agent restarts:
// JSON, {"version": 1, "limits": [SetLimit...]}, replaced atomically (a
// temporary file in the same directory, synced, renamed over it, the
// directory synced).

const stateVersion = 1

// MaxStateBytes bounds the state file the agent reads.
const MaxStateBytes = 16 << 20

type stateFile struct {
	Version int        `json:"version"`
	Limits  []SetLimit `json:"limits"`
}

// DecodeState decodes a state file. A malformed one is an error, not an
// empty set: the agent refuses to start rather than forget limits.
func DecodeState(b []byte) ([]SetLimit, error) {
	if len(b) > MaxStateBytes {
		return nil, fmt.Errorf("gpu state: %d bytes, more than %d", len(b), MaxStateBytes)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("gpu state: %w", err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("gpu state: version %d, want %d", st.Version, stateVersion)
	}
	for _, s := range st.Limits {
		if err := s.Target.check(); err != nil {
			return nil, fmt.Errorf("gpu state: %w", err)
		}
	}
	return st.Limits, nil
}

// LoadState reads the state file at path; a missing file is no limits.
// The file is trusted only when it is a regular file of the process's
// user that neither its group nor others may write, reached through no
// symlink (rundir.ReadTrusted): anyone who could change it could lift
// the limits of every process.
func LoadState(path string) ([]SetLimit, error) {
	b, err := rundir.ReadTrusted(path, os.Geteuid(), MaxStateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gpu state: %w", err)
	}
	return DecodeState(b)
}

// SaveState replaces the state file at path with limits, atomically: a
// temporary file (O_EXCL|O_NOFOLLOW, mode 0600) synced and renamed over
// it (rundir.WriteFile; a symlink at path is replaced, never followed),
// then the directory synced.
func SaveState(path string, limits []SetLimit) error {
	if limits == nil {
		limits = []SetLimit{}
	}
	b, err := json.MarshalIndent(stateFile{Version: stateVersion, Limits: limits}, "", "  ")
	if err != nil {
		return fmt.Errorf("gpu state: %w", err)
	}
	if err := rundir.WriteFile(path, append(b, '\n'), 0o600, -1, -1); err != nil {
		return fmt.Errorf("gpu state: %w", err)
	}
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
