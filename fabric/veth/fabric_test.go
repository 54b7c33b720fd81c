package veth

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSpecValidation(t *testing.T) {
	dir := t.TempDir()
	bad := []Spec{
		{Nodes: 2},
		{Dir: dir, Nodes: 0},
		{Dir: dir, Nodes: 2, MTU: 10},
		{Dir: dir, Nodes: 2, Edges: []Edge{{A: 0, PortA: 0, B: 2, PortB: 0}}},
		{Dir: dir, Nodes: 2, Edges: []Edge{{A: 1, PortA: 0, B: 1, PortB: 1}}},
		{Dir: dir, Nodes: 2, Edges: []Edge{{A: 0, PortA: -1, B: 1, PortB: 0}}},
		{Dir: dir, Nodes: 2, Edges: []Edge{{A: 0, PortA: 1e15, B: 1, PortB: 0}}},
		{Dir: dir, Nodes: 3, Edges: []Edge{{A: 0, PortA: 0, B: 1, PortB: 0}, {A: 0, PortA: 0, B: 2, PortB: 0}}},
	}
	for _, s := range bad {
		if _, err := Up(s); !errors.Is(err, ErrSpec) {
			t.Errorf("Up(%+v) = %v, want ErrSpec", s, err)
		}
	}
	ok := Spec{Dir: dir, Nodes: 3, Edges: []Edge{{0, 0, 1, 0}, {1, 1, 2, 0}, {2, 1, 0, 1}}}
	if err := ok.validate(); err != nil {
		t.Fatalf("ring of 3: %v", err)
	}
}

func TestNames(t *testing.T) {
	dir := t.TempDir()
	id, err := IDFor(dir)
	if err != nil || len(id) != 8 {
		t.Fatalf("IDFor = %q, %v", id, err)
	}
	cwd, _ := os.Getwd()
	rel, err := filepath.Rel(cwd, dir)
	if err != nil {
		t.Fatal(err)
	}
	if id2, _ := IDFor(rel); id2 != id {
		t.Fatalf("relative and absolute dir give %s and %s", id2, id)
	}
	if other, _ := IDFor(filepath.Join(dir, "x")); other == id {
		t.Fatal("two directories share an id")
	}
	f := &Fabric{ID: id, Edges: []Edge{{0, 0, 1, 3}, {2, 1, 0, 2}}}
	if got := f.Namespace(7); got != "dpu-f"+id+"-n7" {
		t.Fatalf("Namespace = %s", got)
	}
	if got := f.PinDir(1, 3); got != "/sys/fs/bpf/dpu-f"+id+"/n1/p3" {
		t.Fatalf("PinDir = %s", got)
	}
	if got := f.Ports(0); len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Fatalf("Ports(0) = %v", got)
	}
	if es := f.links(0, 2); len(es) != 1 || es[0] != (Edge{0, 2, 2, 1}) {
		t.Fatalf("links(0, 2) = %v", es)
	}
	if len(f.links(1, 2)) != 0 {
		t.Fatal("1 and 2 are not neighbours")
	}
}

func TestDownWithoutFabric(t *testing.T) {
	if err := Down(t.TempDir()); err != nil {
		t.Fatalf("Down of an empty dir: %v", err)
	}
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNoFabric) {
		t.Fatalf("Load of an empty dir: %v", err)
	}
}
