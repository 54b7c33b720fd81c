package oci_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/images/oci"
	"github.com/aitherion/dpu/internal/privtest"
)

// TestAgentImageRunsUnderRunc builds the agent image as make image-oci
// does, unpacks it with umoci (an OCI image tool from Debian) into a
// runtime bundle, runs it under runc, asks the agent inside for its stats
// with the image's dpuctl, stops it with SIGTERM and checks it stopped
// cleanly. Root, umoci and runc are needed (.ci/run installs the tools).
func TestAgentImageRunsUnderRunc(t *testing.T) {
	privtest.Require(t)
	for _, tool := range []string{"umoci", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(privtest.Env) == "require" {
				t.Fatalf("%s is not installed but %s=require (.ci/run installs it)", tool, privtest.Env)
			}
			t.Skipf("%s is not installed (Debian: apt-get install umoci runc)", tool)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-trimpath", "-o", bin+"/", "./cmd/dpu-agent", "./cmd/dpuctl")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	img, err := oci.AgentImage(bin, "amd64", "latest")
	if err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(dir, "layout")
	if _, err := oci.WriteLayout(layout, img); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "bundle")
	run(t, 2*time.Minute, "umoci", "unpack", "--image", layout+":latest", bundle)
	// umoci asks for a terminal; this test reads the agent's log instead
	cfgPath := filepath.Join(bundle, "config.json")
	var cfg map[string]any
	b, err := os.ReadFile(cfgPath)
	if err != nil || json.Unmarshal(b, &cfg) != nil {
		t.Fatalf("the bundle's config.json: %v", err)
	}
	cfg["process"].(map[string]any)["terminal"] = false
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}

	state := filepath.Join(dir, "runc")
	id := fmt.Sprintf("dpu-oci-test-%d", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent := exec.CommandContext(ctx, "runc", "--root", state, "run", "-b", bundle, id)
	logR, logW := io.Pipe()
	agent.Stdout, agent.Stderr = logW, logW
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { err := agent.Wait(); logW.Close(); exited <- err }()
	t.Cleanup(func() {
		_ = exec.Command("runc", "--root", state, "delete", "--force", id).Run()
	})
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(logR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var log strings.Builder
	waitFor := func(what string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the container ended before %q:\n%s", what, log.String())
				}
				log.WriteString(l + "\n")
				if strings.Contains(l, what) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q from the container in 30 s:\n%s", what, log.String())
			}
		}
	}
	waitFor("dpu-agent ready")
	out := run(t, 30*time.Second, "runc", "--root", state, "exec", id, "/usr/local/bin/dpuctl", "-s", "/run/dpu/ctl.sock", "stats")
	if !strings.HasPrefix(out, "node 0 uptime ") {
		t.Fatalf("dpuctl stats inside the container: %q", out)
	}
	run(t, 30*time.Second, "runc", "--root", state, "kill", id, "TERM")
	waitFor("dpu-agent stopped")
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the agent's container exited with %v:\n%s", err, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the container did not exit 30 s after the agent stopped:\n%s", log.String())
	}
}

// run runs a command within bound and returns its output, failing the test
// with it when the command fails.
func run(t *testing.T, bound time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
