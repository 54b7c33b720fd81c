// Command dpu-agent is the DPU firmware daemon: the NoC router, path cache,
// ownership arbiter and coherence engine of one node, with its host socket
// (dpu0.sock) and control socket (ctl.sock).
//
//	dpu-agent [--config FILE] [--node N] [--run-dir DIR] [--port "NAME KIND ARGS..."]...
//	          [--log-level LEVEL] [--poll] [--seed S]
//
// Flags override the configuration file; with neither the agent starts a
// single-node fabric with its sockets in /run/dpu (or $DPU_RUN_DIR).
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
	"strings"
	"syscall"

	"github.com/aitherion/dpu/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dpu-agent:", err)
		os.Exit(1)
	}
}

type portFlags []string

func (p *portFlags) String() string     { return strings.Join(*p, ", ") }
func (p *portFlags) Set(s string) error { *p = append(*p, s); return nil }

func run(ctx context.Context, args []string, logOut io.Writer) error {
	fs := flag.NewFlagSet("dpu-agent", flag.ContinueOnError)
	fs.SetOutput(logOut)
	var (
		confPath = fs.String("config", "", "configuration `file`")
		ports    portFlags
	)
	settings := map[string]*string{}
	for _, k := range []string{"node", "run-dir", "log-level", "heartbeat", "dead-interval", "socket-group", "pages", "seed", "xdp-pin-dir", "gpu-mem-limit", "gpu-quota", "request-timeout", "pin-bound", "loop", "spin"} {
		settings[k] = fs.String(k, "", "sets "+k+" (see the configuration file format)")
	}
	poll := fs.Bool("poll", false, "same as --loop poll")
	fs.Var(&ports, "port", "neighbour link `\"NAME KIND ARGS...\"` (repeatable; replaces the file's ports)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := agent.DefaultConfig()
	if d := os.Getenv("DPU_RUN_DIR"); d != "" {
		cfg.RunDir = d
	}
	if *confPath != "" {
		if err := cfg.LoadFile(*confPath); err != nil {
			return err
		}
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if v, ok := settings[f.Name]; ok && err == nil {
			if e := cfg.Set(f.Name, *v); e != nil {
				err = fmt.Errorf("%w: --%s: %w", agent.ErrConfig, f.Name, e)
			}
		}
	})
	if err != nil {
		return err
	}
	if *poll {
		cfg.Loop = agent.LoopPoll
	}
	if len(ports) > 0 {
		cfg.Ports = nil
		for _, s := range ports {
			p, err := agent.ParsePortSpec(s)
			if err != nil {
				return fmt.Errorf("%w: --port: %w", agent.ErrConfig, err)
			}
			cfg.Ports = append(cfg.Ports, p)
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: levelOf(cfg.LogLevel)}))
	a, err := agent.New(cfg, log)
	if err != nil {
		return err
	}
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func levelOf(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s))
	return l
}
