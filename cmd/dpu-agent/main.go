// Command dpu-agent is the DPU firmware daemon: the NoC router, path cache,
// ownership arbiter and coherence engine of one node, with its host socket
// (dpu0.sock) and control socket (ctl.sock).
//
//	dpu-agent [--config FILE] [--node N] [--run-dir DIR] [--port "NAME KIND ARGS..."]...
//	          [--log-level LEVEL] [--poll] [--seed S] [--metrics-listen ADDR] ...
//	dpu-agent --version | --help
//
// Flags override the configuration file; with neither the agent starts a
// single-node fabric with its sockets in /run/dpu (or $DPU_RUN_DIR).
//
// Under systemd (Type=notify) it reports readiness, reloads and shutdown
// with sd_notify. SIGHUP reloads the configuration file (with the same
// flags on top): log-level, metrics-listen and the fabric-keys file change
// at once (a removed or rebound key's link sessions end then, logged); the
// log names every other changed key, which needs a restart. SIGTERM and SIGINT
// stop it cleanly.
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
	"github.com/aitherion/dpu/cmd/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, hup); err != nil {
		fmt.Fprintln(os.Stderr, "dpu-agent:", err)
		os.Exit(1)
	}
}

type portFlags []string

func (p *portFlags) String() string     { return strings.Join(*p, ", ") }
func (p *portFlags) Set(s string) error { *p = append(*p, s); return nil }

// settingFlags are the configuration keys that are also flags.
var settingFlags = []string{"node", "run-dir", "log-level", "heartbeat", "dead-interval", "socket-group", "pages", "seed",
	"xdp-pin-dir", "gpu-mem-limit", "gpu-quota", "request-timeout", "pin-bound", "replicas", "metrics-listen", "loop", "spin", "state-dir", "durable"}

// settingMeaning says what each setting flag sets, with a placeholder for
// its value in backquotes (the flag package shows it as the argument).
var settingMeaning = map[string]string{
	"node":            "this node's `number` in the fabric, unique",
	"run-dir":         "the `directory` of dpu0.sock and ctl.sock ($DPU_RUN_DIR)",
	"log-level":       "`level` of the log: debug, info, warn or error",
	"heartbeat":       "`interval` of link heartbeats",
	"dead-interval":   "`silence` after which a neighbour is down (more than heartbeat)",
	"socket-group":    "`group` that may use the sockets besides the agent's user",
	"pages":           "physical `pages` this node may index (owned, replicas, backups)",
	"seed":            "`seed` of the agent's random source (0: from the clock)",
	"xdp-pin-dir":     "bpffs `directory` where AF_XDP ports pin their maps",
	"gpu-mem-limit":   "default GPU memory limit of a process (`size`, 0: none)",
	"gpu-quota":       "default kernel-time quota of a process (`percent`, 0: none)",
	"request-timeout": "`bound` of every host request",
	"pin-bound":       "how long a lock's pin may stay raised (`duration`)",
	"replicas":        "replication factor `R` (R-1 backups of every owned page)",
	"metrics-listen":  "`address` of the Prometheus /metrics endpoint (off when empty)",
	"loop":            "how the run loop waits: blocking, adaptive or poll (`mode`)",
	"spin":            "how long the adaptive loop spins before it parks (`duration`)",
	"state-dir":       "the `directory` of what outlives a run (allocation epoch, quotas, the durable page log)",
	"durable":         "keep owned pages and backup copies in STATE-DIR/pages.log, synced before every acknowledgement (`true` or false)",
}

// settingHelp is the help line of a setting flag: its meaning and the
// built-in default.
func settingHelp(k string) string {
	d := agent.DefaultConfig()
	def := map[string]string{
		"node": fmt.Sprint(d.Node), "run-dir": d.RunDir, "log-level": d.LogLevel, "heartbeat": d.Heartbeat.String(),
		"dead-interval": d.DeadInterval.String(), "socket-group": "the agent's", "pages": fmt.Sprint(d.Pages), "seed": "0",
		"xdp-pin-dir": "none", "gpu-mem-limit": "0", "gpu-quota": "0", "request-timeout": d.RequestTimeout.String(),
		"pin-bound": d.PinBound.String(), "replicas": "1", "metrics-listen": "off", "loop": d.Loop.String(), "spin": d.Spin.String(),
		"state-dir": "the run directory", "durable": "false",
	}[k]
	return fmt.Sprintf("%s; key %s of the file (default %s)", settingMeaning[k], k, def)
}

// options is a parsed command line.
type options struct {
	confPath string
	settings map[string]*string
	set      map[string]bool // settings given on the command line
	poll     bool
	ports    portFlags
}

func parseFlags(args []string, stdout, stderr io.Writer) (*options, bool, error) {
	fs := flag.NewFlagSet("dpu-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := &options{settings: map[string]*string{}, set: map[string]bool{}}
	fs.StringVar(&o.confPath, "config", "", "configuration `file`")
	for _, k := range settingFlags {
		o.settings[k] = fs.String(k, "", settingHelp(k))
	}
	fs.BoolVar(&o.poll, "poll", false, "same as --loop poll")
	fs.Var(&o.ports, "port", "neighbour link `\"NAME KIND ARGS...\"` (repeatable; replaces the file's ports)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fmt.Fprintln(stdout, "Usage: dpu-agent [OPTIONS]\n\nThe DPU firmware daemon. Flags override the configuration file (see docs/operating.md, \"dpu-agent\").\nSIGHUP reloads the file; SIGTERM or SIGINT stop the agent.\n\nOPTIONS")
		fs.PrintDefaults()
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("%w (dpu-agent --help lists the options)", err)
	case *showVersion:
		fmt.Fprintln(stdout, version.String("dpu-agent"))
		return nil, true, nil
	case fs.NArg() > 0:
		return nil, false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return o, false, nil
}

// config builds the configuration: defaults, $DPU_RUN_DIR, the file, then
// the flags. It runs at start and again on every SIGHUP.
func (o *options) config() (agent.Config, error) {
	cfg := agent.DefaultConfig()
	if d := os.Getenv("DPU_RUN_DIR"); d != "" {
		cfg.RunDir = d
	}
	if o.confPath != "" {
		if err := cfg.LoadFile(o.confPath); err != nil {
			return cfg, err
		}
	}
	for _, k := range settingFlags {
		if o.set[k] {
			if err := cfg.Set(k, *o.settings[k]); err != nil {
				return cfg, fmt.Errorf("%w: --%s: %w", agent.ErrConfig, k, err)
			}
		}
	}
	if o.poll {
		cfg.Loop = agent.LoopPoll
	}
	if len(o.ports) > 0 {
		cfg.Ports = nil
		for _, s := range o.ports {
			p, err := agent.ParsePortSpec(s)
			if err != nil {
				return cfg, fmt.Errorf("%w: --port: %w", agent.ErrConfig, err)
			}
			cfg.Ports = append(cfg.Ports, p)
		}
	}
	return cfg, cfg.Validate()
}

func run(ctx context.Context, args []string, stdout, logOut io.Writer, hup <-chan os.Signal) error {
	o, done, err := parseFlags(args, stdout, logOut)
	if err != nil || done {
		return err
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	var level slog.LevelVar
	level.Set(levelOf(cfg.LogLevel))
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: &level}))
	a, err := agent.New(cfg, log)
	if err != nil {
		return err
	}
	sd := newNotifier()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	ready := a.Ready()
	for {
		select {
		case <-ready:
			ready = nil
			if err := sd.notify("READY=1", "STATUS=serving", fmt.Sprintf("MAINPID=%d", os.Getpid())); err != nil {
				log.Warn("service manager", "err", err)
			}
		case <-hup:
			reload(a, o, &level, log, sd)
		case err := <-runDone:
			sd.notify("STOPPING=1")
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
	}
}

// reload re-reads the configuration on SIGHUP and applies what can change
// live; a configuration that does not load changes nothing.
func reload(a *agent.Agent, o *options, level *slog.LevelVar, log *slog.Logger, sd notifier) {
	sd.notify("RELOADING=1", monotonicUsec())
	defer sd.notify("READY=1", "STATUS=serving")
	cfg, err := o.config()
	if err != nil {
		log.Error("reload: configuration not applied", "err", err)
		return
	}
	applied, restart, err := a.Reload(cfg)
	if err != nil {
		log.Error("reload: configuration not applied", "err", err)
		return
	}
	level.Set(levelOf(cfg.LogLevel))
	attrs := []any{"applied", applied}
	if len(restart) > 0 {
		attrs = append(attrs, "needs_restart", restart)
	}
	log.Info("reloaded", attrs...)
}

func levelOf(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s))
	return l
}
