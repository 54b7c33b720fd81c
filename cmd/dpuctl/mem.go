package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

// The mem object: shared memory through the host interface (dpu0.sock),
// one request per command over one connection (package hostif/client).
//
// A lock lives as long as the connection that took it: the agent releases
// a closed connection's locks. A one-shot "dpuctl mem lock GVA" would
// therefore end its lock as it exits, so lock takes a command to run while
// holding it (mem lock GVA -- CMD ...), and lock/unlock as separate steps
// exist only in mem batch, where one connection reads many commands from
// stdin.

const memUsage = `Usage: dpuctl [-d PATH] [-j] mem COMMAND [ARGS]

  alloc [BYTES] [--mode MODE]     allocate pages on this node (default 4096
                                  bytes, mode 0600); prints the first GVA
  free GVA                        free the allocation that starts at GVA
  read GVA [LEN] [--u64]          LEN bytes at GVA (default 8) as a hex dump,
                                  or the 64-bit little-endian word (--u64)
  write GVA HEX | --u64 N         store bytes (hex digits) or a 64-bit word
  cas GVA EXPECTED DESIRED        compare-and-swap the 64-bit word at GVA
  add GVA DELTA                   fetch-add DELTA (may be negative) to the word
  where GVA                       where the page lives: tier, hops, owner
  lock GVA [--timeout D] -- CMD [ARGS]
                                  run CMD while holding the page's lock
  maps                            the dpu_mmap areas of this host's processes
                                  and their fault counts (libdpu reports them)
  batch                           read commands from stdin, one per line, on
                                  one connection (there lock GVA [--timeout D]
                                  and unlock GVA are separate commands)

GVA is "gva:" + 32 hex digits, optionally followed by +OFFSET (bytes).
Numbers are decimal or 0x hexadecimal. A lock is held at most the agent's
pin bound (pin-bound, 5s by default): a lock revoked while CMD ran is reported and
makes mem lock fail.

OPTIONS
  -d PATH   host interface socket (default $DPU_SOCKET, else
            $DPU_RUN_DIR/dpu0.sock, else /run/dpu/dpu0.sock)
  -j        JSON output (batch: one object per line)
`

// memSession is one connection to the host interface and what runs on it.
type memSession struct {
	e      *env
	client *client.Client
	batch  bool              // commands come from stdin (mem batch)
	held   map[gva.GVA]bool  // pages locked in batch mode
	out    func(v any) error // writes one JSON object
}

// memVerb is one mem command; flags lists its flags, true for those that
// take a value.
type memVerb struct {
	name  string
	flags map[string]bool
	run   func(s *memSession, a memArgs) error
}

var memVerbs []memVerb

func init() {
	memVerbs = []memVerb{
		{"alloc", map[string]bool{"mode": true}, memAlloc},
		{"add", nil, memAdd},
		{"free", nil, memFree},
		{"read", map[string]bool{"u64": false}, memRead},
		{"write", map[string]bool{"u64": true}, memWrite},
		{"where", nil, memWhere},
		{"cas", nil, memCAS},
		{"lock", map[string]bool{"timeout": true}, memLock},
		{"unlock", nil, memUnlock},
		{"batch", nil, memBatch},
		{"maps", nil, memMaps},
		{"help", nil, func(s *memSession, _ memArgs) error { _, err := io.WriteString(s.e.stdout, memUsage); return err }},
	}
}

// memArgs is a parsed mem command line.
type memArgs struct {
	verb  string
	flags map[string]string
	pos   []string // positional arguments
	cmd   []string // what follows "--"
}

// mem is the mem object: dpuctl [-d PATH] [-j] mem COMMAND [ARGS].
func mem(e *env, args []string) error {
	s := &memSession{e: e, held: map[gva.GVA]bool{}}
	s.out = func(v any) error { return e.writeJSON(v) }
	defer s.close()
	return s.exec(args)
}

// exec parses and runs one mem command line.
func (s *memSession) exec(args []string) error {
	v, a, err := parseMem(s.e, args)
	if err != nil {
		return err
	}
	if s.batch && v.name == "batch" {
		return usagef("mem batch: batch inside batch")
	}
	return explainMem(a, v.run(s, a))
}

// parseMem finds the verb and parses its flags (anywhere among the
// arguments, with one or two dashes, "--name=value" or "--name value"),
// -j, -d, and what follows "--". A negative number is an argument.
func parseMem(e *env, args []string) (memVerb, memArgs, error) {
	var v memVerb
	a := memArgs{flags: map[string]string{}}
	haveVerb := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			a.cmd = args[i+1:]
			break
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" || isNumber(arg) {
			if !haveVerb {
				var ok bool
				if v, ok = match(arg, memVerbs, func(v memVerb) string { return v.name }); !ok {
					return v, a, usagef("mem: unknown command %q", arg)
				}
				haveVerb, a.verb = true, v.name
				continue
			}
			a.pos = append(a.pos, arg)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		takesValue, known := v.flags[name]
		switch {
		case name == "j" || name == "json":
			e.json = true
			continue
		case name == "d" || name == "s":
			known, takesValue = true, true
		case !known:
			if !haveVerb {
				return v, a, usagef("mem: flag %q before the command", arg)
			}
			return v, a, usagef("mem %s: unknown flag %q", v.name, arg)
		}
		if takesValue && !hasVal {
			if i+1 >= len(args) {
				return v, a, usagef("mem %s: %s needs a value", v.name, arg)
			}
			i++
			val = args[i]
		} else if !takesValue && hasVal {
			return v, a, usagef("mem %s: %s takes no value", v.name, arg)
		}
		switch name {
		case "d":
			e.device = val
		case "s":
			e.socket = val
		default:
			a.flags[name] = val
		}
	}
	if !haveVerb {
		fmt.Fprint(e.stderr, memUsage)
		return v, a, usagef("mem: no command (alloc, free, read, write, cas, add, where, lock, batch)")
	}
	if a.cmd != nil && v.name != "lock" {
		return v, a, usagef("mem %s: unexpected \"--\"", v.name)
	}
	return v, a, nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseInt(s, 0, 64)
	return err == nil
}

// dial connects on first use.
func (s *memSession) dial() (*client.Client, error) {
	if s.client != nil {
		return s.client, nil
	}
	path := memSocket(s.e)
	c, err := client.Dial(s.e.ctx, path, client.Options{Name: "dpuctl"})
	if err != nil {
		return nil, dialHint(err, "-d names its host socket")
	}
	s.client = c
	return c, nil
}

// close unlocks what a batch left locked, then closes the connection.
func (s *memSession) close() {
	if s.client == nil {
		return
	}
	for g := range s.held {
		fmt.Fprintf(s.e.stderr, "dpuctl: mem batch: unlocking %v, still locked at the end of the input\n", g)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.e.ctx), 5*time.Second)
		if err := s.client.Unlock(ctx, g); err != nil {
			fmt.Fprintf(s.e.stderr, "dpuctl: mem batch: unlock %v: %v\n", g, err)
		}
		cancel()
	}
	s.client.Close()
}

// want checks the number of positional arguments.
func (a memArgs) want(lo, hi int, form string) error {
	if len(a.pos) < lo || len(a.pos) > hi {
		return usagef("mem %s: want %s", a.verb, form)
	}
	return nil
}

// parseAddr reads "gva:<32 hex>[+OFFSET]".
func parseAddr(s string) (gva.GVA, error) {
	base, off, hasOff := strings.Cut(s, "+")
	g, err := gva.Parse(base)
	if err != nil {
		return g, usagef("%v", err)
	}
	if hasOff {
		n, err := strconv.ParseUint(off, 0, 64)
		if err != nil {
			return g, usagef("offset %q: %v", off, err)
		}
		g.Lo += n
	}
	return g, nil
}

func parseU64(what, s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, usagef("%s %q: want a number (decimal or 0x hex)", what, s)
	}
	return v, nil
}

type memResult struct {
	Op       string   `json:"op"`
	GVA      gva.GVA  `json:"gva"`
	Bytes    *uint64  `json:"bytes,omitempty"`
	Pages    *uint64  `json:"pages,omitempty"`
	Mode     string   `json:"mode,omitempty"`
	Len      *int     `json:"len,omitempty"`
	Hex      *string  `json:"hex,omitempty"`
	U64      *uint64  `json:"u64,omitempty"`
	Versions []uint64 `json:"versions,omitempty"`
	Expected *uint64  `json:"expected,omitempty"`
	Desired  *uint64  `json:"desired,omitempty"`
	Delta    *int64   `json:"delta,omitempty"`
	Old      *uint64  `json:"old,omitempty"`
	New      *uint64  `json:"new,omitempty"`
	Swapped  *bool    `json:"swapped,omitempty"`
	Tier     string   `json:"tier,omitempty"`
	Speed    string   `json:"speed,omitempty"`
	Hops     *int     `json:"hops,omitempty"`
	Owner    *uint32  `json:"owner,omitempty"`
	Version  *uint64  `json:"version,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func memAlloc(s *memSession, a memArgs) error {
	if err := a.want(0, 1, "[BYTES] [--mode MODE]"); err != nil {
		return err
	}
	bytes := uint64(gva.PageSize)
	if len(a.pos) == 1 {
		var err error
		if bytes, err = parseSize(a.pos[0]); err != nil || bytes == 0 || bytes > 1<<40 {
			return usagef("mem alloc: size %q: want 1 to 1T bytes (K, M, G, T suffixes)", a.pos[0])
		}
	}
	mode := uint64(0o600)
	if m, ok := a.flags["mode"]; ok {
		var err error
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil || mode > 0o777 || mode == 0 {
			return usagef("mem alloc: mode %q: want octal permission bits 1..0777", m)
		}
	}
	c, err := s.dial()
	if err != nil {
		return err
	}
	g, err := c.Alloc(s.e.ctx, int(bytes), os.FileMode(mode))
	if err != nil {
		return err
	}
	if s.e.json {
		n := (bytes + gva.PageSize - 1) / gva.PageSize
		return s.out(memResult{Op: "alloc", GVA: g, Bytes: ptr(n * gva.PageSize), Pages: ptr(n), Mode: fmt.Sprintf("%04o", mode)})
	}
	_, err = fmt.Fprintln(s.e.stdout, g)
	return err
}

// target checks a command's arguments, parses its GVA (the first
// argument) and connects.
func (s *memSession) target(a memArgs, min, max int, usage string) (gva.GVA, *client.Client, error) {
	if err := a.want(min, max, usage); err != nil {
		return gva.GVA{}, nil, err
	}
	g, err := parseAddr(a.pos[0])
	if err != nil {
		return gva.GVA{}, nil, err
	}
	c, err := s.dial()
	if err != nil {
		return gva.GVA{}, nil, err
	}
	return g, c, nil
}

func memFree(s *memSession, a memArgs) error {
	g, c, err := s.target(a, 1, 1, "GVA")
	if err != nil {
		return err
	}
	if err := c.Free(s.e.ctx, g); err != nil {
		return err
	}
	if s.e.json {
		return s.out(memResult{Op: "free", GVA: g})
	}
	return nil
}

// maxRead bounds one read command.
const maxRead = 1 << 20

func memRead(s *memSession, a memArgs) error {
	if err := a.want(1, 2, "GVA [LEN] [--u64]"); err != nil {
		return err
	}
	g, err := parseAddr(a.pos[0])
	if err != nil {
		return err
	}
	n := 8
	if len(a.pos) == 2 {
		v, err := parseSize(a.pos[1])
		if err != nil || v == 0 || v > maxRead {
			return usagef("mem read: length %q: want 1 to %d bytes", a.pos[1], maxRead)
		}
		n = int(v)
	}
	_, word := a.flags["u64"]
	if word && n != 8 {
		return usagef("mem read: --u64 reads 8 bytes, not %d", n)
	}
	c, err := s.dial()
	if err != nil {
		return err
	}
	buf := make([]byte, n)
	var versions []uint64
	err = gva.EachPage(g, n, func(at gva.GVA, from, to int) error {
		v, err := c.Load(s.e.ctx, at, buf[from:to])
		versions = append(versions, uint64(v))
		return err
	})
	if err != nil {
		return err
	}
	if s.e.json {
		r := memResult{Op: "read", GVA: g, Len: ptr(n), Hex: ptr(hex.EncodeToString(buf)), Versions: versions}
		if word {
			r.U64 = ptr(binary.LittleEndian.Uint64(buf))
		}
		return s.out(r)
	}
	if word {
		_, err = fmt.Fprintln(s.e.stdout, binary.LittleEndian.Uint64(buf))
		return err
	}
	_, err = io.WriteString(s.e.stdout, hex.Dump(buf))
	return err
}

func memWrite(s *memSession, a memArgs) error {
	w, word := a.flags["u64"]
	var (
		g   gva.GVA
		buf []byte
		err error
	)
	if word {
		if err := a.want(1, 1, "GVA --u64 N"); err != nil {
			return err
		}
		v, err := parseU64("mem write: --u64", w)
		if err != nil {
			return err
		}
		buf = binary.LittleEndian.AppendUint64(nil, v)
	} else {
		if err := a.want(2, 2, "GVA HEX, or GVA --u64 N"); err != nil {
			return err
		}
		if buf, err = hex.DecodeString(strings.TrimPrefix(a.pos[1], "0x")); err != nil || len(buf) == 0 || len(buf) > maxRead {
			return usagef("mem write: %q: want an even number of hex digits (at most %d bytes)", a.pos[1], maxRead)
		}
	}
	if g, err = parseAddr(a.pos[0]); err != nil {
		return err
	}
	c, err := s.dial()
	if err != nil {
		return err
	}
	var versions []uint64
	err = gva.EachPage(g, len(buf), func(at gva.GVA, from, to int) error {
		v, err := c.Store(s.e.ctx, at, buf[from:to])
		versions = append(versions, uint64(v))
		return err
	})
	if err != nil {
		return err
	}
	if s.e.json {
		return s.out(memResult{Op: "write", GVA: g, Len: ptr(len(buf)), Versions: versions})
	}
	_, err = fmt.Fprintln(s.e.stdout, "version", strings.Trim(fmt.Sprint(versions), "[]"))
	return err
}

func memCAS(s *memSession, a memArgs) error {
	if err := a.want(3, 3, "GVA EXPECTED DESIRED"); err != nil {
		return err
	}
	g, err := parseAddr(a.pos[0])
	if err != nil {
		return err
	}
	exp, err := parseU64("mem cas: expected", a.pos[1])
	if err != nil {
		return err
	}
	des, err := parseU64("mem cas: desired", a.pos[2])
	if err != nil {
		return err
	}
	c, err := s.dial()
	if err != nil {
		return err
	}
	old, swapped, err := c.CompareAndSwap(s.e.ctx, g, exp, des)
	if err != nil {
		return err
	}
	if s.e.json {
		if err := s.out(memResult{Op: "cas", GVA: g, Expected: &exp, Desired: &des, Old: &old, Swapped: &swapped}); err != nil || swapped || s.batch {
			return err
		}
		return exitStatus{code: 1, what: "mem cas"}
	}
	what := "swapped"
	if !swapped {
		what = "not swapped"
	}
	if _, err = fmt.Fprintf(s.e.stdout, "old %d %s\n", old, what); err != nil {
		return err
	}
	if !swapped && !s.batch {
		return exitStatus{code: 1, what: "mem cas"} // as test(1): the word was not EXPECTED
	}
	return nil
}

func memAdd(s *memSession, a memArgs) error {
	if err := a.want(2, 2, "GVA DELTA"); err != nil {
		return err
	}
	g, err := parseAddr(a.pos[0])
	if err != nil {
		return err
	}
	d, err := strconv.ParseInt(a.pos[1], 0, 64)
	if err != nil {
		return usagef("mem add: delta %q: want a signed 64-bit number", a.pos[1])
	}
	c, err := s.dial()
	if err != nil {
		return err
	}
	old, err := c.FetchAdd(s.e.ctx, g, uint64(d))
	if err != nil {
		return err
	}
	nv := old + uint64(d)
	if s.e.json {
		return s.out(memResult{Op: "add", GVA: g, Delta: &d, Old: &old, New: &nv})
	}
	_, err = fmt.Fprintf(s.e.stdout, "old %d new %d\n", old, nv)
	return err
}

func memWhere(s *memSession, a memArgs) error {
	g, c, err := s.target(a, 1, 1, "GVA")
	if err != nil {
		return err
	}
	l, err := c.Where(s.e.ctx, g)
	if err != nil {
		return err
	}
	if s.e.json {
		return s.out(memResult{Op: "where", GVA: g, Tier: l.Tier.String(), Speed: l.Speed.String(), Hops: ptr(int(l.Hops)),
			Owner: ptr(uint32(l.Owner)), Version: ptr(uint64(l.Version))})
	}
	_, err = fmt.Fprintf(s.e.stdout, "tier %v speed %v hops %d owner %d version %d\n", l.Tier, l.Speed, l.Hops, l.Owner, l.Version)
	return err
}

// memLock runs a command under the lock (lock GVA -- CMD), or, in batch
// mode only, takes the lock until unlock or the end of the batch.
func memLock(s *memSession, a memArgs) error {
	if err := a.want(1, 1, "GVA [--timeout D] -- CMD [ARGS]"); err != nil {
		return err
	}
	g, err := parseAddr(a.pos[0])
	if err != nil {
		return err
	}
	var timeout time.Duration
	if t, ok := a.flags["timeout"]; ok {
		if timeout, err = time.ParseDuration(t); err != nil || timeout <= 0 {
			return usagef("mem lock: timeout %q: want a positive duration (500ms, 2s)", t)
		}
	}
	if len(a.cmd) == 0 && !s.batch {
		return usagef("mem lock: a lock lasts as long as its connection, so dpuctl cannot hold it after it exits: " +
			"run a command under it (mem lock GVA -- CMD ...) or use mem batch")
	}
	c, err := s.dial()
	if err != nil {
		return err
	}
	if err := c.Lock(s.e.ctx, g, timeout); err != nil {
		return err
	}
	if len(a.cmd) == 0 {
		s.held[g.Key()] = true
		if s.e.json {
			return s.out(memResult{Op: "lock", GVA: g})
		}
		return nil
	}
	cmd := exec.CommandContext(s.e.ctx, a.cmd[0], a.cmd[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.e.stdin, s.e.stdout, s.e.stderr
	if s.batch {
		cmd.Stdin = nil // the batch's commands are not the command's input
	}
	cmd.Env = append(os.Environ(), "DPU_LOCKED_GVA="+g.Key().String())
	runErr := cmd.Run()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.e.ctx), 10*time.Second)
	defer cancel()
	if err := c.Unlock(ctx, g); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("mem lock: the lock of %v was revoked while %q ran (held past the agent's pin bound): "+
				"the command did not run under mutual exclusion: %w", g.Key(), a.cmd[0], err)
		}
		return fmt.Errorf("mem lock: unlock after %q: %w", a.cmd[0], err)
	}
	var exit *exec.ExitError
	if errors.As(runErr, &exit) {
		return exitStatus{code: exit.ExitCode(), what: a.cmd[0]}
	}
	if runErr != nil {
		return fmt.Errorf("mem lock: %w", runErr)
	}
	return nil
}

func memUnlock(s *memSession, a memArgs) error {
	if err := a.want(1, 1, "GVA"); err != nil {
		return err
	}
	if !s.batch {
		return usagef("mem unlock: a lock ends with the connection that took it; unlock is a mem batch command")
	}
	g, err := parseAddr(a.pos[0])
	if err != nil {
		return err
	}
	c, err := s.dial()
	if err != nil {
		return err
	}
	if err := c.Unlock(s.e.ctx, g); err != nil {
		return err
	}
	delete(s.held, g.Key())
	if s.e.json {
		return s.out(memResult{Op: "unlock", GVA: g})
	}
	return nil
}

// memBatch runs the commands on stdin, one per line ("#" starts a comment),
// on one connection, and stops at the first that fails.
func memBatch(s *memSession, a memArgs) error {
	if err := a.want(0, 0, "no arguments (commands come from stdin)"); err != nil {
		return err
	}
	s.batch = true
	s.out = func(v any) error { return json.NewEncoder(s.e.stdout).Encode(v) }
	sc := bufio.NewScanner(s.e.stdin)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if err := s.exec(f); err != nil {
			var u usageError
			if errors.As(err, &u) {
				return usagef("mem batch: line %d: %s", line, u.msg)
			}
			return fmt.Errorf("mem batch: line %d: %w", line, err)
		}
	}
	return sc.Err()
}

// exitStatus is a command's non-zero exit, passed on as dpuctl's own (as
// flock(1) does).
type exitStatus struct {
	code int
	what string
}

func (e exitStatus) Error() string { return fmt.Sprintf("%s exited with status %d", e.what, e.code) }
