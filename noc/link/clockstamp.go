package link

import "time"

// ClockSample is one four-timestamp exchange with the peer (times with
// Config.ClockEpoch added): this end sent
// a request at T1 (its clock), the peer received it at T2 and answered at
// T3 (the peer's clock), the answer arrived here at T4 (this end's clock).
// Package noc/clock turns samples into an offset, a rate and a bound.
type ClockSample struct {
	T1, T2, T3, T4 time.Duration
}

// clockSamples is how many samples wait for PollClock; older ones are
// dropped (Stats.ClockDropped).
const clockSamples = 8

// stamper is the clock exchange of an Endpoint with Config.ClockStamps:
// a request every HeartbeatInterval while the link is up, an answer owed
// at once for every request heard.
type stamper struct {
	reqAt   time.Duration // T1 of the request in flight (with ClockEpoch)
	reqOut  bool          // a request is in flight
	lastReq time.Duration // when the last request went out

	owe               bool // an answer is owed
	oweOrigin, oweRcv int64

	ring       [clockSamples]ClockSample
	head, size int
}

// stamp is now on the clock the timestamps are in.
func stamp(now time.Duration, cfg *Config) time.Duration { return now + cfg.ClockEpoch }

// due reports whether a clock datagram is owed at now.
func (s *stamper) due(now time.Duration, cfg *Config, up bool) bool {
	return cfg.ClockStamps && up && (s.owe || now-s.lastReq >= cfg.HeartbeatInterval)
}

// fill sets h's clock flag and timestamps for the datagram going out at
// now: an owed answer first, else a request.
func (s *stamper) fill(now time.Duration, cfg *Config, h *Header) {
	t := stamp(now, cfg)
	if s.owe {
		h.Flags |= FlagClockAns
		h.Clock = Stamps{Origin: s.oweOrigin, Receive: s.oweRcv, Transmit: int64(t)}
		s.owe = false
		return
	}
	h.Flags |= FlagClockReq
	h.Clock = Stamps{Transmit: int64(t)}
	s.reqAt, s.reqOut, s.lastReq = t, true, now
}

// input takes the timestamps of a datagram from the current peer that
// arrived at now.
func (s *stamper) input(now time.Duration, cfg *Config, h *Header, st *Stats) {
	switch h.Flags & flagsClock {
	case FlagClockReq:
		s.owe, s.oweOrigin, s.oweRcv = true, h.Clock.Transmit, int64(stamp(now, cfg))
	case FlagClockAns:
		if !s.reqOut || h.Clock.Origin != int64(s.reqAt) {
			st.ClockStale++ // not an answer to the request in flight
			return
		}
		s.reqOut = false
		if s.size == clockSamples {
			s.head = (s.head + 1) % clockSamples
			s.size--
			st.ClockDropped++
		}
		s.ring[(s.head+s.size)%clockSamples] = ClockSample{
			T1: s.reqAt, T2: time.Duration(h.Clock.Receive), T3: time.Duration(h.Clock.Transmit), T4: stamp(now, cfg),
		}
		s.size++
		st.ClockSamples++
	}
}

// reset forgets the exchange in flight (the link went down).
func (s *stamper) reset() {
	s.reqOut, s.owe = false, false
}

// PollClock returns the oldest clock sample not yet returned. Samples are
// taken only with Config.ClockStamps.
func (e *Endpoint) PollClock() (ClockSample, bool) {
	s := &e.clk
	if s.size == 0 {
		return ClockSample{}, false
	}
	c := s.ring[s.head]
	s.head = (s.head + 1) % clockSamples
	s.size--
	return c, true
}
