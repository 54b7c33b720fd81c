package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// progressEvery is how often the progress line is redrawn.
const progressEvery = 500 * time.Millisecond

// progress redraws one line on a terminal: seeds done of the total, ops/s,
// and the time left at the rate so far. A nil *progress does nothing.
type progress struct {
	w     io.Writer
	total int
	start time.Time

	mu         sync.Mutex
	seeds, ops int

	quit chan struct{}
	wg   sync.WaitGroup
}

func startProgress(w io.Writer, total int, start time.Time) *progress {
	p := &progress{w: w, total: total, start: start, quit: make(chan struct{})}
	p.wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw(time.Now())
			case <-p.quit:
				return
			}
		}
	})
	return p
}

// done counts a finished seed and its ops.
func (p *progress) done(ops int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.seeds++
	p.ops += ops
	p.mu.Unlock()
}

// line is the progress text at now.
func (p *progress) line(now time.Time) string {
	p.mu.Lock()
	seeds, ops := p.seeds, p.ops
	p.mu.Unlock()
	el := now.Sub(p.start)
	rate := 0.0
	if el > 0 {
		rate = float64(ops) / el.Seconds()
	}
	eta := "?"
	if seeds > 0 {
		eta = (el * time.Duration(p.total-seeds) / time.Duration(seeds)).Round(time.Second).String()
	}
	return fmt.Sprintf("seeds %d/%d  ops %d (%.0f/s)  elapsed %v  ETA %s", seeds, p.total, ops, rate, el.Round(time.Second), eta)
}

func (p *progress) draw(now time.Time) {
	fmt.Fprintf(p.w, "\r\x1b[K%s", p.line(now))
}

// stop ends the redraws and clears the line.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	p.wg.Wait()
	fmt.Fprint(p.w, "\r\x1b[K")
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
