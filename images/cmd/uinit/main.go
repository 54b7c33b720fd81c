package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Stderr, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dpu-boot:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("uinit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	supervise := fs.Bool("supervise", false, "run the command after -- and restart it whenever it exits")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *supervise {
		logger := log.New(stderr, "dpu-boot: ", 0)
		if fs.NArg() == 0 {
			return errors.New("-supervise needs a command")
		}
		return superviseCommand(ctx, logger, fs.Args(), defaultBackoff)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	console := openConsole()
	return boot(ctx, log.New(console, "dpu-boot: ", 0), console, linuxSystem{console: console})
}
