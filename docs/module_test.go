package docs_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/hostif"
)

// counterMain is a program of another module that uses the Go client, as
// docs/host-programming.md says to.
const counterMain = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aitherion/dpu/hostif/client"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, os.Args[1], client.Options{Name: "counter"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	g, err := c.Alloc(ctx, 4096, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for range 3 {
		if _, err := c.FetchAdd(ctx, g, 1); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	v, err := c.Load64(ctx, g)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("counter", v)
}
`

// TestGoClientFromAnotherModule builds a program of another module against
// this checkout with the require and replace lines docs/host-programming.md
// shows, and runs it against an agent.
func TestGoClientFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("host-programming.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"require github.com/aitherion/dpu v0.0.0", "replace github.com/aitherion/dpu => ../dpu"} {
		if !strings.Contains(string(doc), line) {
			t.Fatalf("docs/host-programming.md no longer shows %q: keep this test and the doc together", line)
		}
	}
	mod := t.TempDir()
	gomod := "module example.com/counter\n\ngo 1.25\n\nrequire github.com/aitherion/dpu v0.0.0\n\nreplace github.com/aitherion/dpu => " + repo + "\n"
	sum, err := os.ReadFile("../go.sum") // the checksums of the dependencies it brings
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(counterMain)} {
		if err := os.WriteFile(filepath.Join(mod, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-mod=mod", "-o", "counter", ".")
	build.Dir = mod
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a module that requires this one: %v\n%s", err, out)
	}

	cfg := agent.DefaultConfig()
	cfg.RunDir = filepath.Join(t.TempDir(), "run")
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the agent was not ready in 10 s")
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	out, err := exec.CommandContext(rctx, filepath.Join(mod, "counter"), hostif.SocketPath(cfg.RunDir)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "counter 3" {
		t.Fatalf("the other module's program: %v\n%s", err, out)
	}
}
