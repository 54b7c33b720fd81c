package cconst

import "testing"

func TestParse(t *testing.T) {
	m, err := Parse(`
#define PAGE 4096 /* bytes */
#define NAME "text"
enum {
    A = 1, B, // two
    C = 0x10,
    D = PAGE + 8,
    E = D - C,
};
enum tag { F };
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"PAGE": 4096, "A": 1, "B": 2, "C": 16, "D": 4104, "E": 4088, "F": 0}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %d, want %d", k, m[k], v)
		}
	}
	if _, ok := m["NAME"]; ok {
		t.Error("a string #define was read as a number")
	}
	if _, err := Parse("enum { X = Y * 2 };"); err == nil {
		t.Error("an expression it cannot evaluate was accepted")
	}
}

func TestDrift(t *testing.T) {
	got := Drift(map[string]int64{"A": 1, "B": 3}, map[string]int64{"A": 1, "B": 2, "C": 4}, "x.c")
	want := []string{"B: x.c says 3, the Go side 2", "C: not defined in x.c"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Drift = %q, want %q", got, want)
	}
	if d := Drift(map[string]int64{"A": 1}, map[string]int64{"A": 1}, "x.c"); d != nil {
		t.Fatalf("no drift reported as %q", d)
	}
}
