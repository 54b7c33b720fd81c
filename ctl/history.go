package ctl

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aitherion/dpu/noc"
)

// One history from several monitors. Every agent that runs the fabric
// clock stamps its events with the cluster time and its error bound; the
// events of several nodes' monitors, recorded apart (dpuctl -j monitor,
// one JSON object per line), are merged into one history by that time.
// Two events whose cluster times lie within each other's bounds cannot be
// ordered: the later one of the merge is marked uncertain.

// MaxRecordedEvent bounds one line of a recording (an event is a few
// hundred bytes).
const MaxRecordedEvent = 64 << 10

// ReadRecording reads a recording of a monitor: one Event per line as
// dpuctl -j monitor writes it, blank lines skipped. A line that is not
// one event, or is longer than MaxRecordedEvent, is an error that names
// it.
func ReadRecording(r io.Reader) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), MaxRecordedEvent)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var ev Event
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			return nil, fmt.Errorf("line %d: not an event of a monitor: %w", line, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("line %d: more than one event on the line", line)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("a line longer than %d bytes", MaxRecordedEvent)
		}
		return nil, err
	}
	return evs, nil
}

// HistoryEvent is an event of a merged history.
type HistoryEvent struct {
	Event
	// Uncertain: the event's cluster time is within the bounds of an
	// event before it, so their order is not certain.
	Uncertain bool
}

// MergeError names the event a merge could not place.
type MergeError struct {
	Recording, Index int // the recording's index and the event's, from 0
	Err              error
}

func (e *MergeError) Error() string {
	return fmt.Sprintf("recording %d, event %d: %v", e.Recording+1, e.Index+1, e.Err)
}

func (e *MergeError) Unwrap() error { return e.Err }

// Errors of MergeHistory.
var (
	ErrNoClusterTime = errors.New("the event has no cluster time (its agent does not run the fabric clock): events of different nodes cannot be ordered")
	ErrNegativeBound = errors.New("a negative bound on the event's cluster time")
)

// MergeHistory merges recordings (each in the order its monitor printed)
// into one history in cluster-time order; events at one time keep the
// order of the recordings, then their own. It reports the number of
// timelines the cluster times are on (ClusterTime.Timeline): above one,
// times of different timelines are not comparable (the fabric was split
// and its halves joined, or an agent had not joined the fabric's
// timeline yet), and their order is not certain either.
func MergeHistory(recordings ...[]Event) ([]HistoryEvent, int, error) {
	type at struct{ rec, idx int }
	var all []at
	lines := map[noc.NodeID]bool{}
	for i, rec := range recordings {
		for j := range rec {
			c := rec[j].Cluster
			switch {
			case c == nil:
				return nil, 0, &MergeError{i, j, ErrNoClusterTime}
			case c.Error < 0:
				return nil, 0, &MergeError{i, j, fmt.Errorf("%w (%v)", ErrNegativeBound, c.Error)}
			}
			lines[c.Timeline()] = true
			all = append(all, at{i, j})
		}
	}
	ev := func(a at) *Event { return &recordings[a.rec][a.idx] }
	slices.SortStableFunc(all, func(a, b at) int {
		return cmp.Or(cmp.Compare(ev(a).Cluster.Time, ev(b).Cluster.Time), cmp.Compare(a.rec, b.rec), cmp.Compare(a.idx, b.idx))
	})
	out := make([]HistoryEvent, len(all))
	var latest time.Duration // the latest end of a bound so far
	for i, a := range all {
		e := ev(a)
		c := e.Cluster
		out[i] = HistoryEvent{Event: *e, Uncertain: i > 0 && satAdd(c.Time, -c.Error) <= latest}
		if end := satAdd(c.Time, c.Error); i == 0 || end > latest {
			latest = end
		}
	}
	return out, len(lines), nil
}

// satAdd is a+b, held at the ends of time.Duration's range.
func satAdd(a, b time.Duration) time.Duration {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}
