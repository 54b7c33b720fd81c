package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The repository documents itself: every reference its docs make to a
// file or a package must name one the repository has. Checked here:
//
//   - every NAME.md a Markdown file or a Go, C or header file names
//     resolves to a file (from the repository root, the naming file's
//     folder or one of its parents);
//   - every `path` in backquotes of a Markdown file that starts with a
//     top-level folder of the repository exists (build outputs under
//     build/, out/ and cache/ excepted: make makes them);
//   - every "package a/b" a Go comment or a Markdown file names is a folder.
//
// Test files are not documentation and are not read.

var (
	mdName      = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_]\.md\b`)
	quotedPath  = regexp.MustCompile("`([A-Za-z0-9_.-]+/[A-Za-z0-9_./-]*)`")
	packagePath = regexp.MustCompile(`\bpackage ([a-z0-9_]+(?:/[a-z0-9_]+)+)\b`)
	generated   = regexp.MustCompile(`/(build|out|cache)(/|$)`)
)

// pendingRefs are files with a dangling reference that another change
// fixes, each with that change; the test fails once the reference is gone,
// so that the entry goes too.
var pendingRefs = map[string]string{}

// TestDocReferencesResolve checks every reference described above.
func TestDocReferencesResolve(t *testing.T) {
	root := ".."
	tops := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			tops[e.Name()] = true
		}
	}
	exists := func(file, ref string) bool {
		ref = strings.TrimRight(ref, "/.")
		for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(root, dir, ref)); err == nil {
				return true
			}
			if dir == "." || dir == "/" {
				return false
			}
		}
	}
	dangling := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || generated.MatchString("/"+rel) ||
				rel == "bin" || rel == "run") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if strings.HasSuffix(path, "_test.go") || (ext != ".md" && ext != ".go" && ext != ".c" && ext != ".h") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		for _, ref := range mdName.FindAllString(text, -1) {
			if !exists(rel, ref) {
				dangling[rel] = append(dangling[rel], ref)
			}
		}
		for _, m := range packagePath.FindAllStringSubmatch(text, -1) {
			if tops[strings.Split(m[1], "/")[0]] && !exists(".", m[1]) {
				dangling[rel] = append(dangling[rel], "package "+m[1])
			}
		}
		if ext == ".md" {
			for _, m := range quotedPath.FindAllStringSubmatch(text, -1) {
				ref := m[1]
				if !tops[strings.Split(ref, "/")[0]] || generated.MatchString("/"+ref) || strings.ContainsAny(ref, "*") {
					continue
				}
				if !exists(".", ref) && !exists(rel, ref) {
					dangling[rel] = append(dangling[rel], "`"+ref+"`")
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for file, why := range pendingRefs {
		if len(dangling[file]) == 0 {
			t.Errorf("%s no longer has a dangling reference (%s): remove it from pendingRefs", file, why)
		} else {
			t.Logf("%s: %v left to %s", file, dangling[file], why)
		}
		delete(dangling, file)
	}
	for file, refs := range dangling {
		t.Errorf("%s names what the repository does not have: %s", file, strings.Join(refs, ", "))
	}
}
