package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
func LoadState(path string) ([]SetLimit, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gpu state: %w", err)
	}
	return DecodeState(b)
}

// SaveState replaces the state file at path with limits, atomically.
func SaveState(path string, limits []SetLimit) (err error) {
	if limits == nil {
		limits = []SetLimit{}
	}
	b, err := json.MarshalIndent(stateFile{Version: stateVersion, Limits: limits}, "", "  ")
	if err != nil {
		return fmt.Errorf("gpu state: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".gpu-state-*")
	if err != nil {
		return fmt.Errorf("gpu state: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("gpu state: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("gpu state: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("gpu state: %w", err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("gpu state: %w", err)
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
