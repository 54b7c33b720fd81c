package secure

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/flynn/noise"

	"github.com/aitherion/dpu/internal/rundir"
)

// KeyLen is the length of a public or private key (Curve25519).
const KeyLen = 32

// PublicKey is a node's static public key: its identity on the fabric.
type PublicKey [KeyLen]byte

// String is the key in standard base64, as key files and dpuctl show it.
func (k PublicKey) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// IsZero reports whether k is unset.
func (k PublicKey) IsZero() bool { return k == PublicKey{} }

// ParsePublicKey parses a base64 public key.
func ParsePublicKey(s string) (PublicKey, error) {
	var k PublicKey
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != KeyLen {
		return k, fmt.Errorf("secure: %q is not a base64 %d-byte key", s, KeyLen)
	}
	copy(k[:], b)
	return k, nil
}

// KeyPair is a node's static key pair.
type KeyPair struct {
	Private [KeyLen]byte
	Public  PublicKey
}

// GenerateKeyPair draws a new static key pair.
func GenerateKeyPair() (KeyPair, error) {
	dh, err := noise.DH25519.GenerateKeypair(rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("secure: %w", err)
	}
	var kp KeyPair
	copy(kp.Private[:], dh.Private)
	copy(kp.Public[:], dh.Public)
	return kp, nil
}

func (kp KeyPair) dh() noise.DHKey {
	return noise.DHKey{Private: kp.Private[:], Public: kp.Public[:]}
}

// WriteKeyFile writes kp's private key (base64, one line) to path with mode
// 0600, owned by uid:gid (-1 keeps the caller's), never through a symlink.
func WriteKeyFile(path string, kp KeyPair, uid, gid int) error {
	line := base64.StdEncoding.EncodeToString(kp.Private[:]) + "\n"
	return rundir.WriteFile(path, []byte(line), 0o600, uid, gid)
}

// LoadKeyFile reads a private key file. It must be a regular file owned by
// the calling user that neither group nor others may read or write:
// anyone who can read it can be this node.
func LoadKeyFile(path string) (KeyPair, error) {
	f, err := rundir.OpenTrusted(path, os.Geteuid())
	if err != nil {
		return KeyPair{}, fmt.Errorf("secure: key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return KeyPair{}, fmt.Errorf("secure: key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return KeyPair{}, fmt.Errorf("secure: key file %s has mode %v: others can read it (chmod 600)", path, fi.Mode().Perm())
	}
	var buf [256]byte
	n, _ := f.Read(buf[:])
	b, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(buf[:n])))
	if err != nil || len(b) != KeyLen {
		return KeyPair{}, fmt.Errorf("secure: key file %s: not a base64 %d-byte private key", path, KeyLen)
	}
	return keyPairOf(b)
}

func keyPairOf(priv []byte) (KeyPair, error) {
	var kp KeyPair
	copy(kp.Private[:], priv)
	pub, err := noise.DH25519.DH(priv, basePoint[:])
	if err != nil {
		return KeyPair{}, fmt.Errorf("secure: %w", err)
	}
	copy(kp.Public[:], pub)
	return kp, nil
}

// basePoint is Curve25519's base point: DH(priv, basePoint) = pub.
var basePoint = [32]byte{9}

// Fabric is the list of the fabric's public keys: the nodes allowed to be
// neighbours, each key bound to the node id its holder may claim (or, in
// a list written without ids, to none: its holder may claim any). Names
// are for people (dpuctl neigh show).
//
// A Fabric is safe for concurrent use: the ports that share one see a
// Replace at once (their handshakes look keys up as they come).
type Fabric struct {
	mu   sync.RWMutex
	keys map[PublicKey]entry
}

// entry is one key's name and node binding.
type entry struct {
	name  string
	node  uint32
	bound bool
}

// NewFabric returns a key list.
func NewFabric() *Fabric { return &Fabric{keys: map[PublicKey]entry{}} }

// Add allows key under name, bound to no node id (its holder may claim
// any; AddNode binds it).
func (f *Fabric) Add(name string, key PublicKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[key] = entry{name: name}
}

// AddNode allows key under name, for node id node only: a neighbour that
// proves key and claims another id is refused (Node tells the agent which
// id that is).
func (f *Fabric) AddNode(name string, key PublicKey, node uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[key] = entry{name: name, node: node, bound: true}
}

// Lookup returns the name of key and whether the fabric allows it.
func (f *Fabric) Lookup(key PublicKey) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.keys[key]
	return e.name, ok
}

// Node returns the node id key is bound to; bound is false when the list
// binds it to none (or does not list it).
func (f *Fabric) Node(key PublicKey) (node uint32, bound bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e := f.keys[key]
	return e.node, e.bound
}

// Unbound lists the names of the keys bound to no node id.
func (f *Fabric) Unbound() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for _, e := range f.keys {
		if !e.bound {
			out = append(out, e.name)
		}
	}
	slices.Sort(out)
	return out
}

// Len is the number of keys.
func (f *Fabric) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.keys)
}

// KeyChange is a key a Replace added or removed (or rebound), with its
// name.
type KeyChange struct {
	Name string
	Key  PublicKey
}

// Replace makes f's keys those of next and reports which keys it added
// and removed (a key whose name changed is neither; a key bound to
// another node id, or newly bound or unbound, is both: removed, so its
// sessions end, and added). The ports sharing f refuse a removed key's
// handshakes from then on; Port.Revoke ends a session already up with
// one.
func (f *Fabric) Replace(next *Fabric) (added, removed []KeyChange) {
	next.mu.RLock()
	keys := maps.Clone(next.keys)
	next.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, e := range keys {
		if old, ok := f.keys[k]; !ok || old.bound != e.bound || old.node != e.node {
			added = append(added, KeyChange{Name: e.name, Key: k})
		}
	}
	for k, e := range f.keys {
		if n, ok := keys[k]; !ok || n.bound != e.bound || n.node != e.node {
			removed = append(removed, KeyChange{Name: e.name, Key: k})
		}
	}
	f.keys = keys
	return added, removed
}

// Format is the key list in the file format ParseFabric reads.
func (f *Fabric) Format(order []PublicKey) []byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var b strings.Builder
	b.WriteString("# the fabric's node public keys: NAME KEY [node=ID] (written by dpu-fabric)\n")
	for _, k := range order {
		e := f.keys[k]
		if e.bound {
			fmt.Fprintf(&b, "%s %s node=%d\n", e.name, k, e.node)
		} else {
			fmt.Fprintf(&b, "%s %s\n", e.name, k)
		}
	}
	return []byte(b.String())
}

// ErrFabricFile is wrapped by key-list syntax errors.
var ErrFabricFile = errors.New("secure: fabric key list")

// ParseFabric reads a key list: one "NAME BASE64-KEY [node=ID]" per line,
// '#' comments and blank lines ignored. node=ID binds the key to that
// node id (decimal): its holder is refused as a neighbour that claims any
// other. A key listed twice is an error.
func ParseFabric(b []byte) (*Fabric, error) {
	f := NewFabric()
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		fs := strings.Fields(t)
		if len(fs) != 2 && len(fs) != 3 {
			return nil, fmt.Errorf("%w: line %d: want NAME KEY [node=ID]", ErrFabricFile, line)
		}
		k, err := ParsePublicKey(fs[1])
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrFabricFile, line, err)
		}
		if _, dup := f.keys[k]; dup {
			return nil, fmt.Errorf("%w: line %d: key %s listed twice", ErrFabricFile, line, k)
		}
		if len(fs) == 2 {
			f.Add(fs[0], k)
			continue
		}
		id, ok := strings.CutPrefix(fs[2], "node=")
		n, err := strconv.ParseUint(id, 10, 32)
		if !ok || err != nil || n == 0xFFFFFFFF {
			return nil, fmt.Errorf("%w: line %d: %q is not node=ID (a decimal node id)", ErrFabricFile, line, fs[2])
		}
		f.AddNode(fs[0], k, uint32(n))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFabricFile, err)
	}
	return f, nil
}

// LoadFabric reads a key list file (see ParseFabric). Public keys are not
// secret, but the list says who may join: it is trusted only when owned by
// the calling user (or root) and writable by no one else.
func LoadFabric(path string) (*Fabric, error) {
	b, err := rundir.ReadTrusted(path, os.Geteuid(), 1<<20)
	if err != nil && os.Geteuid() != 0 {
		b, err = rundir.ReadTrusted(path, 0, 1<<20)
	}
	if err != nil {
		return nil, fmt.Errorf("secure: fabric keys: %w", err)
	}
	return ParseFabric(b)
}
