// Package docs_test runs the commands the documentation shows and checks
// that docs/architecture.md names every package and top-level folder.
package docs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A shell block is a fenced block whose info string is "sh". The line just
// before its fence may say how the doc test treats it:
//
//	<!-- doctest: skip: REASON -->   not run (REASON says where it is run instead)
//	<!-- doctest: needs CMD -->      run only where CMD is on PATH
//
// Every other shell block runs as written, with bash -euo pipefail, in a
// directory where bin/ holds the binaries make build puts there and run/
// is the 4-node ring make run starts.
type shellBlock struct {
	file  string
	line  int
	text  string
	skip  string // the reason, when marked skip
	needs string // a command the block needs, when marked
}

// docFiles are the files whose shell blocks the doc test runs.
func docFiles(t *testing.T) []string {
	files := []string{"../README.md"}
	md, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(files, md...)
}

var marker = regexp.MustCompile(`^<!-- doctest: (skip: (.+)|needs (\S+)) -->$`)

// shellBlocks returns the shell blocks of file.
func shellBlocks(t *testing.T, file string) []shellBlock {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []shellBlock
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```sh" {
			continue
		}
		blk := shellBlock{file: file, line: i + 1}
		if i > 0 {
			if m := marker.FindStringSubmatch(lines[i-1]); m != nil {
				blk.skip, blk.needs = m[2], m[3]
			} else if strings.HasPrefix(lines[i-1], "<!-- doctest") {
				t.Fatalf("%s:%d: a doctest marker this test does not know: %s", file, i, lines[i-1])
			}
		}
		j := i + 1
		for ; j < len(lines) && lines[j] != "```"; j++ {
		}
		if j == len(lines) {
			t.Fatalf("%s:%d: the shell block is not closed", file, i+1)
		}
		blk.text = strings.Join(lines[i+1:j], "\n") + "\n"
		out = append(out, blk)
		i = j
	}
	return out
}

// maxSkipped bounds the blocks marked skip: a block that cannot run in a
// test is the exception.
const maxSkipped = 3

// TestShellBlocks runs every shell block of README.md and docs/*.md
// against a fabric like make run's.
func TestShellBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts a fabric")
	}
	var blocks []shellBlock
	skipped := 0
	for _, f := range docFiles(t) {
		for _, b := range shellBlocks(t, f) {
			if b.skip != "" {
				skipped++
				t.Logf("%s:%d: not run here: %s", b.file, b.line, b.skip)
				continue
			}
			blocks = append(blocks, b)
		}
	}
	if skipped > maxSkipped {
		t.Errorf("%d shell blocks are marked skip (at most %d): make them runnable", skipped, maxSkipped)
	}
	if len(blocks) == 0 {
		t.Fatal("no shell block to run: the parser is broken")
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/dpuctl", "./cmd/dpu-agent", "./cmd/dpu-fabric", "./cmd/dpu-sim")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sh(t, dir, 90*time.Second, "bin/dpu-fabric up --nodes 4 --topo ring --dir run")
	t.Cleanup(func() { sh(t, dir, 30*time.Second, "bin/dpu-fabric down --dir run") })

	for _, b := range blocks {
		t.Run(fmt.Sprintf("%s:%d", filepath.Base(b.file), b.line), func(t *testing.T) {
			if b.needs != "" {
				if _, err := exec.LookPath(b.needs); err != nil {
					t.Skipf("needs %s (not on PATH; .ci/run installs it)", b.needs)
				}
			}
			sh(t, dir, 2*time.Minute, b.text)
		})
	}
}

// sh runs script with bash -euo pipefail in dir, within bound, and fails
// the test with its output when it fails.
func sh(t *testing.T, dir string, bound time.Duration, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DPU_RUN_DIR=", "DPU_SOCKET=")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v (bound %v)\n--- script\n%s--- output\n%s", err, bound, script, out)
	}
}

// TestShellBlockMarkers: the parser finds blocks and their markers (a doc
// test whose parser found nothing would pass while running nothing).
func TestShellBlockMarkers(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x.md")
	text := "# x\n\n```sh\necho one\n```\n\n<!-- doctest: skip: elsewhere -->\n```sh\nfalse\n```\n" +
		"<!-- doctest: needs dot -->\n```sh\ndot -V\n```\n```\nnot shell\n```\n"
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	bs := shellBlocks(t, f)
	if len(bs) != 3 || bs[0].text != "echo one\n" || bs[1].skip != "elsewhere" || bs[2].needs != "dot" || bs[0].line != 3 {
		t.Fatalf("blocks: %+v", bs)
	}
}
