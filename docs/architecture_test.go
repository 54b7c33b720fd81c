package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureNamesEverything: docs/architecture.md's Layout names
// every top-level folder (as `name/`) and every folder holding Go code (as
// `path`, or `path/` for a top-level one), and every folder its tables'
// first column names exists.
func TestArchitectureNamesEverything(t *testing.T) {
	b, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## Layout\n")
	if i < 0 {
		t.Fatal(`docs/architecture.md has no "## Layout" section`)
	}
	layout := doc[i:]
	if j := strings.Index(layout[1:], "\n## "); j >= 0 {
		layout = layout[:j+1]
	}
	named := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	for _, m := range row.FindAllStringSubmatch(layout, -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}
	if len(named) < 10 {
		t.Fatalf("the Layout tables name %d folders: the parser is broken", len(named))
	}

	root := ".."
	ignored := rootIgnored(t)
	var want []string
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != ".git" && !ignored[e.Name()] {
			want = append(want, e.Name())
		}
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || ignored[strings.Split(rel, "/")[0]] ||
				generated.MatchString("/"+rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			if dir := filepath.Dir(rel); dir != "." && !slices.Contains(want, dir) {
				want = append(want, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range want {
		if !named[dir] {
			t.Errorf("docs/architecture.md's Layout does not name %s: add a row for it", dir)
		}
	}
	for dir := range named {
		if st, err := os.Stat(filepath.Join(root, dir)); err != nil || !st.IsDir() {
			t.Errorf("docs/architecture.md's Layout names %s, which the repository does not have", dir)
		}
	}
}

// rootIgnored are the top-level names the repository's .gitignore leaves
// out (build outputs such as bin/ and run/).
func rootIgnored(t *testing.T) map[string]bool {
	b, err := os.ReadFile("../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "/") && strings.Count(strings.Trim(line, "/"), "/") == 0 {
			out[strings.Trim(line, "/")] = true
		}
	}
	return out
}
