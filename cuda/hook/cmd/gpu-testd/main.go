// Command gpu-testd serves what the CUDA hook needs of a dpu-agent and
// nothing else: the host interface (RUN_DIR/dpu0.sock) with GPU accounting
// (package cuda/ledger) in front of an in-memory page backend, and the control
// socket (RUN_DIR/ctl.sock) for dpuctl gpu show|set. gpu-test.sh runs
// programs under the hook against it on machines with a GPU.
//
//	gpu-testd -run-dir DIR [-mem SIZE] [-quota PCT] [-window DUR]
//
// It serves until SIGINT or SIGTERM and logs the accounting's events
// (re-reports, releases, limits set) on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/cuda/ledger"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpu-testd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-testd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runDir := fs.String("run-dir", "", "directory of dpu0.sock and ctl.sock (required)")
	mem := fs.String("mem", "0", "default GPU memory limit per process and device (K, M, G suffixes; 0: unlimited)")
	quota := fs.Uint("quota", 0, "default kernel-time quota, percent (0: unlimited)")
	window := fs.Duration("window", 100*time.Millisecond, "quota window")
	state := fs.String("state", "", "state file keeping limits set at run time across restarts (default RUN-DIR/gpu-limits.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runDir == "" || fs.NArg() != 0 {
		fs.Usage()
		return errors.New("-run-dir is required and there are no arguments")
	}
	limit, err := parseSize(*mem)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*runDir, 0o750); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if *state == "" {
		*state = filepath.Join(*runDir, "gpu-limits.json")
	}
	acc, err := ledger.New(ledger.Config{Default: ledger.Limit{Memory: limit, Quota: uint32(*quota)}, Window: *window,
		StateFile: *state}, ledger.Options{Logger: log})
	if err != nil {
		return err
	}
	fab := hostiftest.NewFabric()
	be := fab.Node(1)
	defer be.Close()
	srv, err := hostif.NewServer(be, hostif.Options{GPU: acc, Logger: log})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	serve := func(name string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	serve("host interface", func() error { return srv.ListenAndServe(ctx, hostif.SocketPath(*runDir)) })
	cs := ctl.NewServer(source{gpuctl.Commands(acc)}, log)
	serve("control socket", func() error { return cs.ListenAndServe(ctx, filepath.Join(*runDir, "ctl.sock")) })
	log.Info("serving", "run_dir", *runDir, "mem", limit, "quota", *quota, "window", *window)
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(ch chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

// source is a control Source with no fabric: only the GPU objects.
type source struct{ ctl.CommandSource }

func (source) Routes() []ctl.Route         { return nil }
func (source) Links() []ctl.Link           { return nil }
func (source) Neighbours() []ctl.Neighbour { return nil }
func (source) Stats() ctl.Stats            { return ctl.Stats{} }
func (source) Topology() ctl.Topology      { return ctl.Topology{} }

func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	return n * mult, nil
}
