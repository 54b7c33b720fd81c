package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// complete runs the bash completion for the words typed so far (the last
// one being completed) and returns the candidates.
func complete(t *testing.T, script string, words ...string) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	f := filepath.Join(t.TempDir(), "c.bash")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + w + "'"
	}
	prog := "source " + f + "; COMP_WORDS=(dpuctl " + strings.Join(q, " ") + "); COMP_CWORD=" +
		strconv.Itoa(len(words)) + "; _dpuctl; echo \"${COMPREPLY[*]}\""
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bash, "--norc", "-c", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestBashCompletion(t *testing.T) {
	script, _, err := dpuctl(t, "completion", "bash")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"ro"}, "route"},
		{[]string{"-s", "x.sock", "pat"}, "pathcache"},
		{[]string{"pa"}, "pathcache page"},
		{[]string{"link", ""}, "show list capture"},
		{[]string{"mem", "c"}, "cas"},
		{[]string{"gpu", "s"}, "show set"},
		{[]string{"-"}, "-s -d -j --version"},
	} {
		if got := complete(t, script, tc.words...); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.words, got, tc.want)
		}
	}
	zsh, _, err := dpuctl(t, "completion", "zsh")
	if err != nil || !strings.HasPrefix(zsh, "#compdef dpuctl\n") || !strings.Contains(zsh, script) {
		t.Errorf("zsh: %v", err)
	}
	if _, _, err := dpuctl(t, "completion", "fish"); !isUsage(err) {
		t.Errorf("fish: %v", err)
	}
}

// The man page holds the help text and is valid roff (when groff is here
// to say so).
func TestManPage(t *testing.T) {
	page, _, err := dpuctl(t, "man")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(page, ".TH DPUCTL 1 ") {
		t.Fatalf("%.40q", page)
	}
	for _, o := range objects {
		if !strings.Contains(page, o.name) {
			t.Errorf("the man page does not mention %s", o.name)
		}
	}
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "'") {
			t.Errorf("line would be a roff control line: %q", line)
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		return
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff: %v\n%s", err, out)
	}
}
