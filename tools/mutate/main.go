package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// target is one package to mutate: its directory (relative to the module
// root), and, where only part of it is meant (hostif: admission), the files
// to take.
type target struct {
	dir   string
	files []string // nil: every non-test file
}

// defaultTargets are the core packages.
var defaultTargets = []target{
	{dir: "coherence"},
	{dir: "arbiter"},
	{dir: "pathcache"},
	{dir: "noc/link"},
	{dir: "noc/route"},
	{dir: "hostif", files: []string{"perm.go", "pipeline.go", "dispatch.go"}},
	{dir: "internal/quota"},
}

// simLinked are the packages dpu-sim runs: a survivor of the package
// tests there meets the simulator too.
var simLinked = map[string]bool{"coherence": true, "arbiter": true, "pathcache": true, "noc/link": true, "noc/route": true}

// mutant is one planted change: bytes [off, end) of file replaced by repl.
type mutant struct {
	pkg, file  string // file relative to the module root
	off, end   int
	orig, repl string
	op         string
	line, col  int
	why        string // listed mutants: the bug it stands for
}

func (m mutant) String() string {
	return fmt.Sprintf("%s:%d:%d %s: %q -> %q", m.file, m.line, m.col, m.op, m.orig, m.repl)
}

// outcome is what the oracle made of a mutant.
type outcome struct {
	m       mutant
	verdict string // killed, survived, invalid, equivalent (triaged, not run)
	by      string // what killed it: test names, "timeout", or "sim: ..."
	took    time.Duration
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 12, "sampled mutants per package (0: all sites)")
	seed := fs.Uint64("seed", 1, "seed of the sample")
	pkgs := fs.String("pkgs", "", "comma-separated package directories (default: the core packages)")
	timeout := fs.Duration("timeout", 60*time.Second, "bound of one oracle step (a test run past it kills the mutant)")
	simSeeds := fs.Int("sim-seeds", 6, "dpu-sim seeds per replication factor for survivors of the package tests (0: no simulator)")
	listOnly := fs.Bool("list", false, "print the chosen mutants and stop")
	listed := fs.Bool("listed", true, "also run the listed mutants (known bugs that must stay caught)")
	out := fs.String("o", "", "also write the report as Markdown to this file")
	runEq := fs.Bool("run-equivalent", false, "also run the mutants triaged as equivalent (equivalent.go) instead of reporting them unrun")
	at := fs.String("at", "", "comma-separated file:line:col: of the chosen mutants run only those (to re-check survivors)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	targets := defaultTargets
	if *pkgs != "" {
		targets = nil
		for _, p := range strings.Split(*pkgs, ",") {
			t := target{dir: p}
			for _, d := range defaultTargets {
				if d.dir == p {
					t = d
				}
			}
			targets = append(targets, t)
		}
	}
	var all []mutant
	for _, t := range targets {
		sites, err := enumerate(root, t)
		if err != nil {
			return err
		}
		chosen := sample(sites, *n, *seed)
		fmt.Fprintf(stderr, "%s: %d sites, %d chosen\n", t.dir, len(sites), len(chosen))
		all = append(all, chosen...)
	}
	if *listed {
		ls, err := listedMutants(root, targets)
		if err != nil {
			return err
		}
		all = append(all, ls...)
	}
	if *at != "" {
		want := strings.Split(*at, ",")
		all = slices.DeleteFunc(all, func(m mutant) bool {
			return !slices.Contains(want, fmt.Sprintf("%s:%d:%d", m.file, m.line, m.col))
		})
	}
	eq, err := equivalentSites(root, targets)
	if err != nil {
		return err
	}
	if *runEq {
		eq = nil
	}
	if *listOnly {
		for _, m := range all {
			if why, ok := eq[siteKey(m.file, m.off, m.repl)]; ok {
				fmt.Fprintf(stdout, "%s [equivalent: %s]\n", m, why)
				continue
			}
			fmt.Fprintln(stdout, m)
		}
		return nil
	}
	tmp, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o := &oracle{root: root, tmp: tmp, timeout: *timeout, simSeeds: *simSeeds, log: stderr}
	for _, t := range targets {
		if err := o.baseline(t.dir); err != nil {
			return err
		}
	}
	start := time.Now()
	var res []outcome
	for i, m := range all {
		var r outcome
		if why, ok := eq[siteKey(m.file, m.off, m.repl)]; ok {
			r = outcome{m: m, verdict: "equivalent", by: why}
		} else {
			r = o.try(m)
		}
		res = append(res, r)
		fmt.Fprintf(stderr, "[%d/%d] %-8s %s (%v) %s\n", i+1, len(all), r.verdict, m, r.took.Round(100*time.Millisecond), r.by)
	}
	rep := report(res, *n, *seed, *simSeeds, time.Since(start))
	fmt.Fprint(stdout, rep)
	if *out != "" {
		return os.WriteFile(*out, []byte(rep), 0o644)
	}
	return nil
}

func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(b))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// sample returns n of sites (all when n is 0 or more than there are),
// chosen by seed, in file order.
func sample(sites []mutant, n int, seed uint64) []mutant {
	if n <= 0 || n >= len(sites) {
		return sites
	}
	idx := make([]int, len(sites))
	for i := range idx {
		idx[i] = i
	}
	r := rand.New(rand.NewPCG(seed, 0x6d7574616e74))
	r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	idx = idx[:n]
	sort.Ints(idx)
	out := make([]mutant, 0, n)
	for _, i := range idx {
		out = append(out, sites[i])
	}
	return out
}

// Operators.
var (
	binarySwap = map[token.Token]struct {
		op   string
		repl token.Token
	}{
		token.LSS:  {"boundary", token.LEQ},
		token.LEQ:  {"boundary", token.LSS},
		token.GTR:  {"boundary", token.GEQ},
		token.GEQ:  {"boundary", token.GTR},
		token.EQL:  {"negate", token.NEQ},
		token.NEQ:  {"negate", token.EQL},
		token.ADD:  {"arith", token.SUB},
		token.SUB:  {"arith", token.ADD},
		token.LAND: {"logic", token.LOR},
		token.LOR:  {"logic", token.LAND},
	}
	// skipCalls are calls whose arguments are messages or debugging.
	skipCalls = map[string]bool{"debugf": true, "Errorf": true, "Sprintf": true, "Printf": true, "Fprintf": true,
		"Warn": true, "Info": true, "Debug": true, "Error": true, "panic": true, "New": false}
	// skipConds mark debug and planted-bug guards.
	skipConds = regexp.MustCompile(`\bdbg\b|bugsCompiled|\.Bug\b`)
)

// enumerate lists every mutation site of t's files.
func enumerate(root string, t target) ([]mutant, error) {
	dir := filepath.Join(root, t.dir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var sites []mutant
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || name == "doc.go" {
			continue
		}
		if t.files != nil && !slices.Contains(t.files, name) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if isConstrained(src) {
			continue // build-tagged (planted bugs, platform files): not what the tests build by default
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		sites = append(sites, fileSites(fset, f, src, t.dir, filepath.Join(t.dir, name))...)
	}
	return sites, nil
}

// isConstrained reports a //go:build line before the package clause, or
// a generated file.
func isConstrained(src []byte) bool {
	head, _, _ := bytes.Cut(src, []byte("\npackage "))
	return bytes.Contains(head, []byte("//go:build")) || bytes.Contains(head, []byte("Code generated"))
}

// fileSites walks one file.
func fileSites(fset *token.FileSet, f *ast.File, src []byte, pkg, file string) []mutant {
	var sites []mutant
	add := func(pos token.Pos, end token.Pos, repl, op string) {
		p := fset.Position(pos)
		off, e := p.Offset, fset.Position(end).Offset
		sites = append(sites, mutant{pkg: pkg, file: file, off: off, end: e, orig: string(src[off:e]), repl: repl, op: op, line: p.Line, col: p.Column})
	}
	var walk func(n ast.Node) bool
	walk = func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.GenDecl:
			if x.Tok == token.CONST || x.Tok == token.IMPORT {
				return false // constants' values are the spec; mutating them is another exercise
			}
		case *ast.CallExpr:
			if skipCalls[callName(x)] {
				return false
			}
		case *ast.IfStmt:
			cond := string(src[fset.Position(x.Cond.Pos()).Offset:fset.Position(x.Cond.End()).Offset])
			if skipConds.MatchString(cond) {
				if x.Else != nil {
					ast.Inspect(x.Else, walk)
				}
				return false
			}
			add(x.Cond.Pos(), x.Cond.End(), "false", "if-false")
		case *ast.BinaryExpr:
			if s, ok := binarySwap[x.Op]; ok {
				if x.Op == token.ADD || x.Op == token.SUB {
					if isStringy(x) {
						break
					}
				}
				add(x.OpPos, x.OpPos+token.Pos(len(x.Op.String())), s.repl.String(), s.op)
			}
		case *ast.IncDecStmt:
			repl := "--"
			if x.Tok == token.DEC {
				repl = "++"
			}
			add(x.TokPos, x.TokPos+2, repl, "incdec")
		}
		return true
	}
	ast.Inspect(f, walk)
	return sites
}

func callName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// isStringy: a + with a string literal operand (a concatenation).
func isStringy(x *ast.BinaryExpr) bool {
	for _, e := range []ast.Expr{x.X, x.Y} {
		if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
			return true
		}
	}
	return false
}

// apply returns m's file with the change made.
func apply(src []byte, m mutant) []byte {
	out := make([]byte, 0, len(src)+len(m.repl))
	out = append(out, src[:m.off]...)
	out = append(out, m.repl...)
	return append(out, src[m.end:]...)
}

// oracle runs the checks on mutants.
type oracle struct {
	root     string
	tmp      string
	timeout  time.Duration
	simSeeds int
	log      io.Writer
	n        int
}

// baseline checks that dir's tests pass unmutated: a failing oracle
// would kill every mutant.
func (o *oracle) baseline(dir string) error {
	out, err := o.goCmd("", "test", "-short", "-count=1", "./"+dir+"/")
	if err != nil {
		return fmt.Errorf("%s fails without a mutant (fix that first):\n%s", dir, tail(out, 2000))
	}
	return nil
}

var failRE = regexp.MustCompile(`(?m)^--- FAIL: (\S+)`)

func (o *oracle) try(m mutant) (r outcome) {
	start := time.Now()
	r.m = m
	defer func() { r.took = time.Since(start) }()
	overlay, err := o.overlay(m)
	if err != nil {
		r.verdict, r.by = "invalid", err.Error()
		return r
	}
	out, err := o.goCmd(overlay, "test", "-short", "-count=1", "-timeout", o.timeout.String(), "./"+m.pkg+"/")
	switch {
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		r.verdict, r.by = "invalid", firstLine(out)
		return r
	case errors.Is(err, context.DeadlineExceeded) || bytes.Contains(out, []byte("panic: test timed out")):
		r.verdict, r.by = "killed", "timeout"
		return r
	case err != nil:
		names := failRE.FindAllSubmatch(out, -1)
		var ns []string
		for _, x := range names {
			if s := string(x[1]); !strings.Contains(s, "/") {
				ns = append(ns, s)
			}
		}
		r.verdict, r.by = "killed", strings.Join(ns, " ")
		if r.by == "" {
			r.by = firstLine(out)
		}
		return r
	}
	if o.simSeeds > 0 && simLinked[m.pkg] {
		if by, killed := o.sim(overlay); killed {
			r.verdict, r.by = "killed", "sim: "+by
			return r
		}
	}
	r.verdict = "survived"
	return r
}

// overlay writes m's file and the overlay naming it.
func (o *oracle) overlay(m mutant) (string, error) {
	o.n++
	abs := filepath.Join(o.root, m.file)
	src, err := os.ReadFile(abs)
	if err != nil {
		return "", err
	}
	if string(src[m.off:m.end]) != m.orig {
		return "", fmt.Errorf("%s: the source moved under the mutant", m.file)
	}
	mf := filepath.Join(o.tmp, fmt.Sprintf("m%d_%s", o.n, filepath.Base(m.file)))
	if err := os.WriteFile(mf, apply(src, m), 0o644); err != nil {
		return "", err
	}
	j, err := json.Marshal(map[string]map[string]string{"Replace": {abs: mf}})
	if err != nil {
		return "", err
	}
	of := filepath.Join(o.tmp, fmt.Sprintf("m%d.json", o.n))
	return of, os.WriteFile(of, j, 0o644)
}

// sim builds dpu-sim with the overlay and runs the short sweep at R = 1
// and R = 2.
func (o *oracle) sim(overlay string) (string, bool) {
	bin := filepath.Join(o.tmp, "dpu-sim")
	if out, err := o.goCmd(overlay, "build", "-o", bin, "./cmd/dpu-sim"); err != nil {
		return "build: " + firstLine(out), true
	}
	for _, r := range []string{"1", "2"} {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		cmd := exec.CommandContext(ctx, bin, "--seeds", fmt.Sprint(o.simSeeds), "--nodes", "16", "--topo", "smallworld", "--faults", "all", "--replicas", r)
		cmd.Dir = o.root
		out, err := cmd.CombinedOutput()
		late := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		if late {
			return "R=" + r + " timeout", true
		}
		if err != nil {
			return "R=" + r + " " + violation(out), true
		}
	}
	return "", false
}

// violation picks the first violation line of a dpu-sim output.
func violation(out []byte) string {
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "violation") || strings.Contains(l, "not linearizable") {
			return strings.TrimSpace(l)
		}
	}
	return firstLine(out)
}

func (o *oracle) goCmd(overlay string, args ...string) ([]byte, error) {
	if overlay != "" {
		args = append([]string{args[0], "-overlay", overlay}, args[1:]...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.root
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return out, fmt.Errorf("go %s: %w", strings.Join(args, " "), ctx.Err())
	}
	return out, err
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return s
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
