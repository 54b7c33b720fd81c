package veth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// StateFile is the name of the state file inside the fabric directory.
const StateFile = "veth-fabric.json"

// Kinds of recorded objects.
const (
	objNetns  = "netns"
	objVeth   = "veth"
	objPinDir = "pindir"
)

// object is one kernel object Up created (or was about to create).
type object struct {
	Kind string `json:"kind"`
	// netns: Name. veth: NS/Name and PeerNS/Peer. pindir: Path.
	Name   string `json:"name,omitempty"`
	NS     string `json:"ns,omitempty"`
	Peer   string `json:"peer,omitempty"`
	PeerNS string `json:"peer_ns,omitempty"`
	Path   string `json:"path,omitempty"`
}

// state is the content of the state file.
type state struct {
	ID      string   `json:"id"`
	Nodes   int      `json:"nodes"`
	Edges   []Edge   `json:"edges"`
	MTU     int      `json:"mtu"`
	Queues  int      `json:"queues,omitempty"`
	Objects []object `json:"objects"`
}

func statePath(dir string) string { return filepath.Join(dir, StateFile) }

// readState loads the state file of dir.
func readState(dir string) (*state, error) {
	b, err := os.ReadFile(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s in %s", ErrNoFabric, StateFile, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("veth: read state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("veth: parse %s: %w", statePath(dir), err)
	}
	return &st, nil
}

// write replaces the state file atomically and durably: a crash leaves
// either the old or the new file.
func (st *state) write(dir string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("veth: encode state: %w", err)
	}
	tmp := statePath(dir) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("veth: write state: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("veth: write state: %w", err)
	}
	if err := os.Rename(tmp, statePath(dir)); err != nil {
		return fmt.Errorf("veth: write state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// record appends o to the state file; only then may o be created.
func (st *state) record(dir string, o object) error {
	st.Objects = append(st.Objects, o)
	if err := st.write(dir); err != nil {
		st.Objects = st.Objects[:len(st.Objects)-1]
		return err
	}
	if afterRecord != nil {
		afterRecord(len(st.Objects))
	}
	return nil
}

// afterRecord, when set (tests), runs after the n-th object is recorded
// and before it is created: the point where a crash leaves the most behind.
var afterRecord func(n int)
