package link

import (
	"errors"
	"fmt"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Config shapes one Endpoint. Both ends of a link must use the same MTU.
type Config struct {
	// MTU is the largest datagram the port carries; each data datagram
	// carries up to MTU-Overhead payload bytes.
	MTU int
	// Window bounds the datagrams in flight and is the receive buffer this
	// end advertises credits from (1..MaxWindow).
	Window int
	// SendQueue is how many fragments may wait for the window beyond the
	// Window in flight. A message of k fragments needs k free; a small
	// message is one fragment.
	SendQueue int
	// MaxMessage is the largest message Send accepts and Receive delivers.
	// It must fit in Window fragments.
	MaxMessage int
	// RTO is the initial retransmission timeout and its floor; MaxRTO is
	// where exponential backoff stops.
	RTO, MaxRTO time.Duration
	// HeartbeatInterval is the longest the endpoint stays silent;
	// DeadInterval without a datagram from the peer (or without progress
	// on data in flight) declares the link down.
	HeartbeatInterval, DeadInterval time.Duration
	// AckDelay is how long an ack owed for in-order data may wait for
	// outgoing data to ride on (a request's answer, usually) before it
	// goes alone; the second unacknowledged data datagram, one out of
	// order and an AckReq are acked at once. Zero acks every data datagram
	// at once. It must stay well below RTO.
	AckDelay time.Duration
	// ClockStamps makes the endpoint exchange clock timestamps with its
	// peer while the link is up: a request every HeartbeatInterval (on a
	// datagram that would otherwise be a heartbeat) and an answer at once
	// for each request heard. PollClock returns the samples.
	ClockStamps bool
	// ClockEpoch is added to now in every clock timestamp, sent or
	// sampled: the driver's clock reading at now = 0 (the agent's
	// CLOCK_MONOTONIC at its start), so that timestamps survive a restart
	// of the driver.
	ClockEpoch time.Duration
	// Pack lets small messages share a datagram: a message that fits in
	// the room left by the one queued before it, not yet sent, rides in
	// its datagram (FlagPacked), once the peer's feature word says it
	// unpacks them. Every message stays whole and in order; the peer
	// acknowledges the datagram, so a packed datagram takes one credit.
	Pack bool
	// Session identifies this incarnation of the endpoint; non-zero. The
	// driver draws it from its seeded random source.
	Session uint64
}

// Limits of a Config.
const (
	// MaxWindow is the largest Window (credits travel in 16 bits).
	MaxWindow = 1 << 15
	// MinMTU leaves room for the header and at least 64 payload bytes.
	MinMTU = Overhead + 64
	// MaxMTU is the largest datagram a link header can describe.
	MaxMTU = 0xFFFF
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("link: invalid config")

// DefaultConfig returns a Config for a 1500-byte link carrying NoC frames of
// up to noc.HeaderLen+noc.MaxPayload bytes. Session is left zero: the driver
// must fill it.
func DefaultConfig() Config {
	return Config{
		MTU:               1500,
		Window:            64,
		SendQueue:         256,
		MaxMessage:        noc.HeaderLen + noc.MaxPayload,
		RTO:               10 * time.Millisecond,
		MaxRTO:            500 * time.Millisecond,
		HeartbeatInterval: 50 * time.Millisecond,
		DeadInterval:      time.Second,
		Pack:              true,
	}
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.MTU < MinMTU || c.MTU > MaxMTU:
		return bad("MTU %d outside [%d, %d]", c.MTU, MinMTU, MaxMTU)
	case c.Window < 1 || c.Window > MaxWindow:
		return bad("Window %d outside [1, %d]", c.Window, MaxWindow)
	case c.SendQueue < 0 || c.SendQueue > MaxWindow:
		return bad("SendQueue %d outside [0, %d]", c.SendQueue, MaxWindow)
	case c.MaxMessage < 0:
		return bad("MaxMessage %d is negative", c.MaxMessage)
	case c.fragments(c.MaxMessage) > c.Window:
		return bad("a %d-byte message needs %d fragments of %d bytes, more than Window %d",
			c.MaxMessage, c.fragments(c.MaxMessage), c.fragmentLen(), c.Window)
	case c.AckDelay < 0 || c.AckDelay >= c.RTO:
		return bad("AckDelay %v outside [0, RTO %v)", c.AckDelay, c.RTO)
	case c.RTO <= 0 || c.MaxRTO < c.RTO:
		return bad("RTO %v, MaxRTO %v: need 0 < RTO <= MaxRTO", c.RTO, c.MaxRTO)
	case c.HeartbeatInterval <= 0:
		return bad("HeartbeatInterval %v is not positive", c.HeartbeatInterval)
	case c.DeadInterval < 2*c.HeartbeatInterval || c.DeadInterval <= c.MaxRTO:
		return bad("DeadInterval %v must be at least two heartbeats (%v) and longer than MaxRTO (%v)",
			c.DeadInterval, c.HeartbeatInterval, c.MaxRTO)
	case c.Session == 0:
		return bad("Session is zero")
	}
	return nil
}

// fragmentLen is the payload of one data datagram this end sends.
func (c *Config) fragmentLen() int { return c.MTU - Overhead }

// fragments is how many datagrams a message of n bytes takes (at least one).
func (c *Config) fragments(n int) int {
	f := c.fragmentLen()
	return max(1, (n+f-1)/f)
}
