// Command dpu-cc compiles and links C and C++ programs for the dpu shared
// address space: it takes the usual cc arguments, compiles with
// ThreadSanitizer's instrumentation (-fsanitize=thread) so that every atomic
// operation and every plain load and store calls the runtime, adds the
// include path of dpu.h, and links libdpurt (the project's runtime, cc/)
// and libdpu instead of the TSan runtime. Atomics on addresses a program
// mapped with dpu_mmap then run at the page's owner; everything else runs
// natively.
//
//	dpu-cc [-dpu-access-hooks] [-dpu-verbose] CC-ARGUMENTS...
//
// The compiler is $DPU_CC_COMPILER, else $CC, else cc (gcc and clang both
// work). Programs see __DPU_CC__ defined. Before linking, dpu-cc lists the
// __tsan_ symbols every object needs and fails, naming them, when libdpurt
// does not define one (cc/README.md lists what it defines).
//
// Plain loads and stores: with clang they are not instrumented unless
// -dpu-access-hooks asks for it; page faults on dpu_mmap pages serve them
// (private memory then runs at native speed). With gcc, which cannot leave
// them out, every plain access calls a runtime hook that takes one compare
// for private memory and, for a shared page, brings it in without waiting
// for the fault. -dpu-verbose prints the commands it runs on stderr.
//
// Files are found next to the executable (bin/../hostif/c, bin/../cc of a
// source tree, or PREFIX/include and PREFIX/lib of an install), or under
// $DPU_CC_ROOT.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aitherion/dpu/cmd/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is dpu-cc with its arguments; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	opts, ccArgs := splitOwnFlags(args)
	if len(ccArgs) == 1 && ccArgs[0] == "--version" {
		// dpu-cc's own version first, then the compiler it drives
		cc := compiler()
		fmt.Fprintf(stdout, "%s\ncompiler: %s (DPU_CC_COMPILER or CC picks another)\n", version.String("dpu-cc"), cc)
		c := exec.Command(cc, "--version")
		c.Stdout, c.Stderr = stdout, stderr
		if err := c.Run(); err != nil {
			fmt.Fprintf(stderr, "dpu-cc: %s --version: %v\n", cc, err)
			return 1
		}
		return 0
	}
	lay, err := findLayout()
	if err != nil {
		fmt.Fprintln(stderr, "dpu-cc:", err)
		return 2
	}
	cc := compiler()
	d := driver{cc: cc, clang: isClang(cc), lay: lay, opts: opts, stdout: stdout, stderr: stderr}
	if err := d.build(ccArgs); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintln(stderr, "dpu-cc:", err)
		return 1
	}
	return 0
}

type options struct {
	accessHooks bool
	verbose     bool
}

func splitOwnFlags(args []string) (options, []string) {
	var o options
	var rest []string
	for _, a := range args {
		switch a {
		case "-dpu-access-hooks":
			o.accessHooks = true
		case "-dpu-verbose":
			o.verbose = true
		default:
			rest = append(rest, a)
		}
	}
	return o, rest
}

// layout is where dpu.h, libdpu, libdpurt and its symbol list are.
type layout struct {
	include, libdpu, libdpurt, syms string
}

func findLayout() (layout, error) {
	var roots []string
	if r := os.Getenv("DPU_CC_ROOT"); r != "" {
		roots = append(roots, r)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			roots = append(roots, filepath.Dir(filepath.Dir(exe)))
		}
	}
	for _, r := range roots {
		for _, l := range []layout{
			{filepath.Join(r, "hostif/c/include"), filepath.Join(r, "hostif/c/build/libdpu.a"),
				filepath.Join(r, "cc/build/libdpurt.a"), filepath.Join(r, "cc/build/dpurt.syms")},
			{filepath.Join(r, "include"), filepath.Join(r, "lib/libdpu.a"),
				filepath.Join(r, "lib/libdpurt.a"), filepath.Join(r, "lib/dpurt.syms")},
		} {
			if l.complete() {
				return l, nil
			}
		}
	}
	return layout{}, fmt.Errorf("dpu.h, libdpu.a, libdpurt.a and dpurt.syms not found under %v (run make build, or set DPU_CC_ROOT)", roots)
}

func (l layout) complete() bool {
	for _, p := range []string{filepath.Join(l.include, "dpu.h"), l.libdpu, l.libdpurt, l.syms} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

func compiler() string {
	for _, env := range []string{"DPU_CC_COMPILER", "CC"} {
		if c := os.Getenv(env); c != "" {
			return c
		}
	}
	return "cc"
}

func isClang(cc string) bool {
	out, err := exec.Command(cc, "--version").Output()
	return err == nil && bytes.Contains(out, []byte("clang"))
}

type driver struct {
	cc     string
	clang  bool
	lay    layout
	opts   options
	stdout io.Writer
	stderr io.Writer
}

// instrument is what every compilation gets.
func (d *driver) instrument() []string {
	f := []string{"-fsanitize=thread", "-I" + d.lay.include, "-D__DPU_CC__=1"}
	if d.clang {
		// Function entry/exit hooks serve the race detector's stacks only.
		f = append(f, "-fno-sanitize-thread-func-entry-exit")
		if !d.opts.accessHooks {
			f = append(f, "-fno-sanitize-thread-memory-access")
		}
	} else {
		f = append(f, "--param=tsan-instrument-func-entry-exit=0")
	}
	return f
}

func (d *driver) build(args []string) error {
	cl := classify(args)
	switch {
	case len(cl.sources) == 0 && len(cl.inputs) == 0:
		return d.cmd(args) // --version and the like
	case cl.compileOnly:
		return d.cmd(append(d.instrument(), args...))
	case cl.lang:
		return errors.New("-x in a compile-and-link command: compile with -c first, then link the objects")
	}
	tmp, err := os.MkdirTemp("", "dpu-cc")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	objs := map[int]string{}
	var toCheck []string
	for n, i := range cl.sources {
		obj := filepath.Join(tmp, fmt.Sprintf("%d-%s.o", n, strings.TrimSuffix(filepath.Base(args[i]), filepath.Ext(args[i]))))
		cargs := append(append(d.instrument(), cl.compileFlags...), "-c", args[i], "-o", obj)
		if err := d.cmd(cargs); err != nil {
			return err
		}
		objs[i] = obj
		toCheck = append(toCheck, obj)
	}
	for _, i := range cl.inputs {
		if strings.HasSuffix(args[i], ".o") {
			toCheck = append(toCheck, args[i])
		}
	}
	if err := d.checkSymbols(toCheck); err != nil {
		return err
	}
	var link []string
	for i, a := range args {
		if obj, ok := objs[i]; ok {
			link = append(link, obj)
			continue
		}
		if strings.HasPrefix(a, "-fsanitize=") {
			continue // the link takes our runtime, not a sanitizer's
		}
		link = append(link, a)
	}
	link = append(link, d.lay.libdpurt, d.lay.libdpu, "-pthread")
	return d.cmd(link)
}

// checkSymbols fails when an object needs a __tsan_ entry point that
// libdpurt does not define.
func (d *driver) checkSymbols(objs []string) error {
	if len(objs) == 0 {
		return nil
	}
	have, err := os.ReadFile(d.lay.syms)
	if err != nil {
		return err
	}
	defined := map[string]bool{}
	for _, s := range strings.Fields(string(have)) {
		defined[s] = true
	}
	out, err := exec.Command("nm", append([]string{"-u"}, objs...)...).Output()
	if err != nil {
		return fmt.Errorf("nm -u (to check the runtime's entry points): %w", err)
	}
	missing := missingSymbols(string(out), defined)
	if len(missing) > 0 {
		return fmt.Errorf("the objects need %s, which libdpurt does not provide (cc/README.md lists what it does); not linking",
			strings.Join(missing, ", "))
	}
	return nil
}

// missingSymbols picks the __tsan_ names of nm -u output that defined lacks.
func missingSymbols(nmOut string, defined map[string]bool) []string {
	seen := map[string]bool{}
	var missing []string
	for _, line := range strings.Split(nmOut, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := f[len(f)-1]
		if strings.HasPrefix(name, "__tsan_") && !defined[name] && !seen[name] {
			seen[name] = true
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing
}

func (d *driver) cmd(args []string) error {
	if d.opts.verbose {
		fmt.Fprintln(d.stderr, d.cc, strings.Join(args, " "))
	}
	c := exec.Command(d.cc, args...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, d.stdout, d.stderr
	return c.Run()
}

// classified is a cc command line taken apart.
type classified struct {
	compileOnly  bool     // -c, -S, -E, or dependency output only
	lang         bool     // -x given
	sources      []int    // indexes of C/C++ source files
	inputs       []int    // indexes of other input files (objects, archives)
	compileFlags []string // the arguments a compile step of one source takes
}

// withValue are options whose value is the next argument.
var withValue = map[string]bool{
	"-o": true, "-I": true, "-L": true, "-l": true, "-D": true, "-U": true, "-include": true, "-imacros": true,
	"-isystem": true, "-idirafter": true, "-iquote": true, "-x": true, "-MF": true, "-MT": true, "-MQ": true,
	"-Xlinker": true, "-Xassembler": true, "-Xpreprocessor": true, "-T": true, "-u": true, "-e": true,
	"--param": true, "-target": true, "-isysroot": true, "--sysroot": true,
}

// linkOnly are options a compile step must not see.
var linkOnly = map[string]bool{
	"-shared": true, "-static": true, "-pie": true, "-no-pie": true, "-rdynamic": true, "-s": true,
	"-pthread": false, // both
}

var sourceExt = map[string]bool{".c": true, ".cc": true, ".cpp": true, ".cxx": true, ".c++": true, ".C": true}

func classify(args []string) classified {
	var c classified
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c" || a == "-S" || a == "-E" || a == "-M" || a == "-MM":
			c.compileOnly = true
			c.compileFlags = append(c.compileFlags, a)
		case a == "-x":
			c.lang = true
			i++
		case withValue[a]:
			if i+1 < len(args) {
				if !linkValue(a) && a != "-o" {
					c.compileFlags = append(c.compileFlags, a, args[i+1])
				}
				i++
			}
		case strings.HasPrefix(a, "-l") || strings.HasPrefix(a, "-L") || strings.HasPrefix(a, "-Wl,") || linkOnly[a]:
		case strings.HasPrefix(a, "-fsanitize="):
		case strings.HasPrefix(a, "-"):
			c.compileFlags = append(c.compileFlags, a)
		case sourceExt[filepath.Ext(a)]:
			c.sources = append(c.sources, i)
		default:
			c.inputs = append(c.inputs, i)
		}
	}
	return c
}

func linkValue(opt string) bool {
	switch opt {
	case "-L", "-l", "-Xlinker", "-T", "-u", "-e":
		return true
	}
	return false
}
