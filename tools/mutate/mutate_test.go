package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const sample1 = `package p

import "fmt"

func f(a, b int, dbg bool) (int, error) {
	if dbg {
		fmt.Printf("%d", a+b)
	}
	if a < b && b != 0 {
		a++
		return a - b, nil
	}
	return 0, fmt.Errorf("%d", a+b)
}
`

// TestSitesAndApply: every operator finds its sites, debugging and message
// calls are left alone, and applying a mutant changes exactly its bytes.
func TestSitesAndApply(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", sample1, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	sites := fileSites(fset, f, []byte(sample1), "p", "p/p.go")
	var got []string
	for _, m := range sites {
		got = append(got, m.op+" "+m.orig+">"+m.repl+" "+string(rune('0'+m.line/10))+string(rune('0'+m.line%10)))
	}
	want := []string{
		"if-false a < b && b != 0>false 09",
		"logic &&>|| 09",
		"boundary <><= 09",
		"negate !=>== 09",
		"incdec ++>-- 10",
		"arith ->+ 11",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("sites:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	m := sites[2]
	out := string(apply([]byte(sample1), m))
	if !strings.Contains(out, "if a <= b && b != 0 {") || len(out) != len(sample1)+1 {
		t.Fatalf("applied:\n%s", out)
	}
}

// TestSampleIsDeterministic: a seed picks the same mutants in file order;
// another seed other ones; n 0 takes all.
func TestSampleIsDeterministic(t *testing.T) {
	var sites []mutant
	for i := range 100 {
		sites = append(sites, mutant{off: i})
	}
	a, b, c := sample(sites, 10, 1), sample(sites, 10, 1), sample(sites, 10, 2)
	if len(a) != 10 || !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Fatalf("samples %v %v %v", a, b, c)
	}
	if !slices.IsSortedFunc(a, func(x, y mutant) int { return x.off - y.off }) {
		t.Fatalf("sample not in file order: %v", a)
	}
	if len(sample(sites, 0, 1)) != 100 {
		t.Fatal("n 0 does not take every site")
	}
}

// TestKnownBugsAreFound: each listed mutant's text occurs once in its
// file (the list follows the code).
func TestKnownBugsAreFound(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	ms, err := listedMutants(root, defaultTargets)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(knownBugs) {
		t.Fatalf("%d of %d known bugs made into mutants", len(ms), len(knownBugs))
	}
}

// TestEquivalentsAreSites: each mutant triaged as equivalent is found
// once in its file and is one of the sites the operators make there (the
// list follows the code, and names the mutant it means).
func TestEquivalentsAreSites(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	eq, err := equivalentSites(root, defaultTargets)
	if err != nil {
		t.Fatal(err)
	}
	if len(eq) != len(equivalents) {
		t.Fatalf("%d of %d equivalent mutants resolved", len(eq), len(equivalents))
	}
	sites := map[string]bool{}
	for _, tg := range defaultTargets {
		ms, err := enumerate(root, tg)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			sites[siteKey(m.file, m.off, m.repl)] = true
		}
	}
	for k, why := range eq {
		if !sites[k] {
			t.Errorf("equivalent %s (%s) is no mutation site", k, why)
		}
	}
}
