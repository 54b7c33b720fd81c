package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/aitherion/dpu/ctl"
)

// monitorMerge is "dpuctl monitor merge FILE...": the recordings of
// several agents' monitors (dpuctl -j monitor, one event per line; "-"
// reads stdin) as one history, in the order of the events' cluster time
// (ctl.MergeHistory). Two events whose cluster times are closer than
// their bounds cannot be ordered: the text output marks the later one
// with "~". The JSON output is the events alone, so that it merges again.
func monitorMerge(e *env, args []string) error {
	files, err := commandArgs(e, "monitor merge", args, nil)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usagef("monitor merge: no recording (FILE... made with dpuctl -j monitor, - for stdin)")
	}
	if n := countOf(files, "-"); n > 1 {
		return usagef("monitor merge: - (stdin) given %d times", n)
	}
	recs := make([][]ctl.Event, len(files))
	for i, name := range files {
		var err error
		if recs[i], err = readRecording(e, name); err != nil {
			return fmt.Errorf("monitor merge: %s: %w", name, err)
		}
	}
	history, lines, err := ctl.MergeHistory(recs...)
	if me := (*ctl.MergeError)(nil); errors.As(err, &me) {
		return fmt.Errorf("monitor merge: %s: event %d: %w", files[me.Recording], me.Index+1, me.Err)
	} else if err != nil {
		return fmt.Errorf("monitor merge: %w", err)
	}
	if lines > 1 {
		fmt.Fprintf(e.stderr, "dpuctl: monitor merge: the events' cluster times are on %d timelines: times of different timelines are not comparable, and their order is not certain\n", lines)
	}
	enc := json.NewEncoder(e.stdout)
	for _, h := range history {
		if e.json {
			if err := enc.Encode(h.Event); err != nil {
				return err
			}
			continue
		}
		mark := "  "
		if h.Uncertain {
			mark = "~ "
		}
		if _, err := io.WriteString(e.stdout, mark+eventLine(h.Event)); err != nil {
			return err
		}
	}
	return nil
}

// readRecording reads recording name ("-": stdin).
func readRecording(e *env, name string) ([]ctl.Event, error) {
	if name == "-" {
		return ctl.ReadRecording(e.stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ctl.ReadRecording(f)
}

// countOf counts the elements of xs equal to x.
func countOf[T comparable](xs []T, x T) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}
