package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// backoff is the supervisor's restart policy.
type backoff struct {
	First  time.Duration // delay after the first quick exit
	Max    time.Duration // bound of the delay
	Stable time.Duration // a run this long resets the delay to First
	Grace  time.Duration // how long a stopped command has to exit after SIGTERM
}

var defaultBackoff = backoff{First: time.Second, Max: 30 * time.Second, Stable: time.Minute, Grace: 5 * time.Second}

// superviseCommand runs argv, restarting it whenever it exits, until ctx
// ends; then it stops it and its process group (SIGTERM, then SIGKILL
// after the grace period).
// The command inherits the supervisor's standard output and error.
func superviseCommand(ctx context.Context, logger *log.Logger, argv []string, b backoff) error {
	delay := b.First
	for runs := 1; ; runs++ {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		// A process group of its own, so that stopping it stops whatever
		// it started too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			logger.Printf("start %s: %v", argv[0], err)
		} else {
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				ran := time.Since(start).Round(time.Millisecond)
				if ran >= b.Stable {
					delay = b.First
				}
				logger.Printf("%s exited (%s) after %v, run %d", argv[0], exitText(err), ran, runs)
			case <-ctx.Done():
				return stopCommand(logger, cmd, done, b.Grace)
			}
		}
		logger.Printf("restarting %s in %v", argv[0], delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, b.Max)
	}
}

// stopCommand asks a running command to exit and waits for it, killing it
// if it outlives grace.
func stopCommand(logger *log.Logger, cmd *exec.Cmd, done <-chan error, grace time.Duration) error {
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		logger.Printf("stop: %v", err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err := <-done:
		logger.Printf("%s stopped (%s)", cmd.Path, exitText(err))
		return nil
	case <-timer.C:
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", cmd.Path, err)
	}
	<-done
	logger.Printf("%s killed after %v", cmd.Path, grace)
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}
