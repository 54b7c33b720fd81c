package secure

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"

	"github.com/aitherion/dpu/noc"
)

// Config shapes a secure Port.
type Config struct {
	// Static is this node's key pair.
	Static KeyPair
	// Fabric lists the public keys allowed as neighbours.
	Fabric *Fabric
	// RekeyAfter: the side that initiated a session starts a new handshake
	// once the session is this old (default 2 minutes); RejectAfter: a
	// session this old is used no more (default RekeyAfter + 1 minute).
	RekeyAfter, RejectAfter time.Duration
	// HandshakeRetry paces handshake attempts (default 250ms).
	HandshakeRetry time.Duration
	// HandshakeRate bounds the handshake messages (init and finish) this
	// port processes per second (default 50, burst the same): beyond it
	// they are dropped before any public-key work.
	HandshakeRate int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *Config) fill() error {
	if c.Fabric == nil {
		return errors.New("secure: Config.Fabric is required")
	}
	if c.Static.Public.IsZero() {
		return errors.New("secure: Config.Static is required")
	}
	if c.RekeyAfter <= 0 {
		c.RekeyAfter = 2 * time.Minute
	}
	if c.RejectAfter <= c.RekeyAfter {
		c.RejectAfter = c.RekeyAfter + time.Minute
	}
	if c.HandshakeRetry <= 0 {
		c.HandshakeRetry = 250 * time.Millisecond
	}
	if c.HandshakeRate <= 0 {
		c.HandshakeRate = 50
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// expiryCheck: the reader reads the clock once per this many datagrams
// of a session (writes read it every time).
const expiryCheck = 256

// rejectCounter: a session seals no more than this many datagrams.
const rejectCounter = 1 << 60

var suite = noise.NewCipherSuite(noise.DH25519, noise.CipherAESGCM, noise.HashSHA256)

// prologue binds every handshake to this protocol and version.
var prologue = []byte("dpu noc link v1")

// Stats counts what a Port refused and did.
type Stats struct {
	Sealed, Opened    uint64
	Handshakes        uint64 // sessions established
	Refused           uint64 // handshakes with a key the fabric does not list
	RateLimited       uint64 // handshake messages dropped by HandshakeRate
	Replayed          uint64 // datagrams refused by the replay window
	Unauthentic       uint64 // datagrams that failed authentication
	Malformed         uint64 // datagrams that are no message
	NoSession         uint64 // datagrams for an unknown session
	DroppedNoSession  uint64 // writes dropped while no session was up
	HandshakeFailures uint64 // handshake messages that did not verify
	Bundled           uint64 // datagrams sent sealed together with others
	CookiesSent       uint64 // inits answered with a cookie (under load)
	CookiesTaken      uint64 // cookies received for a handshake of ours
}

// Port seals every datagram of an inner noc.Port in an authenticated
// session with a neighbour whose static key the fabric lists (see the
// package documentation). It is safe for one concurrent reader and one
// concurrent writer, like any noc.Port.
type Port struct {
	inner noc.Port
	cfg   Config

	wmu    sync.Mutex // serialises writes to inner (the reader answers handshakes)
	wbuf   []byte
	batch  [][]byte // WriteDatagrams' sealed buffers
	sealed [][]byte // the slice of them handed to the inner port
	groups []int    // WriteDatagrams' bundles: the end of each in bufs

	mu      sync.Mutex
	cur     *session // the session writes use
	prev    *session // the one before it, still accepted for a while
	hs      *handshake
	resp    *handshake
	tokens  float64
	tokenAt time.Time
	cookies cookies
	peer    PublicKey
	peerOK  bool
	rbuf    []byte
	rbatch  batchScratch // TryReadDatagrams; reader only
	rmsg    message
	bundle  []byte // the reader's opened bundle
	pend    []byte // what of it is still to be read

	stats struct {
		sealed, opened, handshakes, refused, rateLimited, replayed, unauthentic,
		malformed, noSession, droppedNoSession, hsFailures, bundled, cookiesSent, cookiesTaken atomic.Uint64
	}
}

// session is one established key pair.
type session struct {
	local, remote uint32
	send, recv    transport
	counter       atomic.Uint64
	created       time.Time
	initiator     bool
	confirmed     atomic.Bool // initiator: the responder has used it
	peer          PublicKey

	expired atomic.Bool // past RejectAfter: used no more

	rmu   sync.Mutex // guards win and opens (the reader only, but sessions rotate)
	win   window
	opens uint64
}

// handshake is one handshake in progress.
type handshake struct {
	state   *noise.HandshakeState
	local   uint32
	remote  uint32
	started time.Time
	init    []byte // initiator: the init message, without a mac
	cookied bool   // initiator: sent again with a cookie's mac
}

// New wraps inner. The inner port must not be used directly afterwards.
func New(inner noc.Port, cfg Config) (*Port, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if inner.MTU() <= Overhead+responseLen-Overhead {
		return nil, fmt.Errorf("secure: inner MTU %d too small", inner.MTU())
	}
	p := &Port{inner: inner, cfg: cfg, wbuf: make([]byte, 0, inner.MTU()), rbuf: make([]byte, inner.MTU()),
		bundle: make([]byte, 0, inner.MTU()),
		tokens: float64(cfg.HandshakeRate)}
	return p, nil
}

// Name is the inner port's name.
func (p *Port) Name() string { return p.inner.Name() }

// MTU is the inner MTU less the sealing overhead.
func (p *Port) MTU() int { return p.inner.MTU() - Overhead }

// Inner returns the wrapped port.
func (p *Port) Inner() noc.Port { return p.inner }

// Peer returns the static key of the neighbour of the current session.
func (p *Port) Peer() (PublicKey, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peer, p.peerOK
}

// Revoke ends the sessions with the neighbour when its key is no longer in
// the fabric (after Fabric.Replace removed it) or is one of changed (keys
// a Replace rebound to another node id), and reports whether it did: what
// the neighbour sends is dropped from then on (no session), and the next
// write starts a handshake that only a listed key completes.
func (p *Port) Revoke(changed ...PublicKey) (PublicKey, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.peerOK {
		return PublicKey{}, false
	}
	if _, ok := p.cfg.Fabric.Lookup(p.peer); ok && !slices.Contains(changed, p.peer) {
		return PublicKey{}, false
	}
	k := p.peer
	p.cur, p.prev, p.hs, p.resp = nil, nil, nil, nil
	p.peerOK = false
	return k, true
}

// PeerName returns the fabric's name of the current neighbour's key.
func (p *Port) PeerName() (string, bool) {
	k, ok := p.Peer()
	if !ok {
		return "", false
	}
	return p.cfg.Fabric.Lookup(k)
}

// Stats returns the port's counters.
func (p *Port) Stats() Stats {
	s := &p.stats
	return Stats{Sealed: s.sealed.Load(), Opened: s.opened.Load(), Handshakes: s.handshakes.Load(), Refused: s.refused.Load(),
		RateLimited: s.rateLimited.Load(), Replayed: s.replayed.Load(), Unauthentic: s.unauthentic.Load(),
		Malformed: s.malformed.Load(), NoSession: s.noSession.Load(), DroppedNoSession: s.droppedNoSession.Load(),
		HandshakeFailures: s.hsFailures.Load(), Bundled: s.bundled.Load(),
		CookiesSent: s.cookiesSent.Load(), CookiesTaken: s.cookiesTaken.Load()}
}

// WriteDatagram seals b in the current session and sends it. With no
// session up it starts (or paces) a handshake and drops b: the port is
// unreliable and the link layer above retransmits.
func (p *Port) WriteDatagram(b []byte) error {
	if len(b) > p.MTU() {
		return fmt.Errorf("secure: datagram of %d bytes over MTU %d", len(b), p.MTU())
	}
	now := p.cfg.Now()
	p.mu.Lock()
	s := p.sendable(now)
	var init []byte
	if s == nil || p.wantRekey(s, now) {
		init = p.startHandshake(now)
	}
	p.mu.Unlock()
	if init != nil {
		if err := p.send(init); err != nil {
			return err
		}
	}
	if s == nil {
		p.stats.droppedNoSession.Add(1)
		return nil
	}
	n := s.counter.Add(1) - 1
	if n >= rejectCounter {
		return nil
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	w := seal(p.wbuf, s, n, b)
	p.stats.sealed.Add(1)
	return p.inner.WriteDatagram(w)
}

// seal writes the data message of b with counter n into buf's storage.
func seal(buf []byte, s *session, n uint64, b []byte) []byte {
	w := buf[:dataHeader]
	w[0] = msgData
	binary.BigEndian.PutUint32(w[1:], s.remote)
	binary.BigEndian.PutUint64(w[5:], n)
	return s.send.Encrypt(w, n, w[:dataHeader], b)
}

// WriteDatagrams seals bufs and hands them to the inner port, in one
// batch when it is a noc.BatchWriter (one lock, one clock read, one system
// call for the lot). Consecutive datagrams that fit in one MTU together
// are sealed together as a bundle (one AEAD operation, one counter, one
// inner datagram): this is what makes sealing cheap under load, when the
// link layer has many small datagrams to write at once. Nothing waits for
// more: what is written now is sealed now, and a lone datagram goes as a
// plain data message.
func (p *Port) WriteDatagrams(bufs [][]byte) error {
	if len(bufs) == 0 {
		return nil
	}
	mtu := p.MTU()
	for _, b := range bufs {
		if len(b) > mtu {
			return fmt.Errorf("secure: datagram of %d bytes over MTU %d", len(b), mtu)
		}
	}
	now := p.cfg.Now()
	p.mu.Lock()
	s := p.sendable(now)
	var init []byte
	if s == nil || p.wantRekey(s, now) {
		init = p.startHandshake(now)
	}
	p.mu.Unlock()
	if init != nil {
		if err := p.send(init); err != nil {
			return err
		}
	}
	if s == nil {
		p.stats.droppedNoSession.Add(uint64(len(bufs)))
		return nil
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	// group consecutive datagrams greedily: a group ends where the next
	// one would not fit
	p.groups = p.groups[:0]
	for i := 0; i < len(bufs); {
		j, size := i+1, bundleEntry+len(bufs[i])
		for j < len(bufs) && size+bundleEntry+len(bufs[j]) <= mtu {
			size += bundleEntry + len(bufs[j])
			j++
		}
		p.groups = append(p.groups, j)
		i = j
	}
	ng := uint64(len(p.groups))
	first := s.counter.Add(ng) - ng
	if first+ng > rejectCounter {
		return nil
	}
	for len(p.batch) < len(p.groups) {
		p.batch = append(p.batch, make([]byte, 0, p.inner.MTU()))
	}
	out := p.sealed[:0]
	i := 0
	for g, j := range p.groups {
		buf := p.batch[g][:0:cap(p.batch[g])]
		if j == i+1 {
			out = append(out, seal(buf, s, first+uint64(g), bufs[i]))
		} else {
			out = append(out, sealBundle(buf, s, first+uint64(g), bufs[i:j]))
			p.stats.bundled.Add(uint64(j - i))
		}
		i = j
	}
	p.sealed = out[:0]
	p.stats.sealed.Add(ng)
	if bw, ok := p.inner.(noc.BatchWriter); ok {
		return bw.WriteDatagrams(out)
	}
	for _, w := range out {
		if err := p.inner.WriteDatagram(w); err != nil {
			return err
		}
	}
	return nil
}

// sealBundle writes the bundle message of bufs (which fit in the MTU
// together) with counter n into buf's storage, sealing it in place.
func sealBundle(buf []byte, s *session, n uint64, bufs [][]byte) []byte {
	w := buf[:dataHeader]
	w[0] = msgBundle
	binary.BigEndian.PutUint32(w[1:], s.remote)
	binary.BigEndian.PutUint64(w[5:], n)
	for _, b := range bufs {
		w = binary.BigEndian.AppendUint16(w, uint16(len(b)))
		w = append(w, b...)
	}
	return s.send.Encrypt(w[:dataHeader], n, w[:dataHeader], w[dataHeader:])
}

// sendable is the session writes may use now (nil: none).
func (p *Port) sendable(now time.Time) *session {
	s := p.cur
	if s == nil || s.expired.Load() || s.counter.Load() >= rejectCounter {
		return nil
	}
	if now.Sub(s.created) >= p.cfg.RejectAfter {
		s.expired.Store(true)
		return nil
	}
	return s
}

// wantRekey: the initiator renews an old session; an initiator whose
// session the responder never used (its finish was lost) starts over.
func (p *Port) wantRekey(s *session, now time.Time) bool {
	if !s.initiator {
		return false
	}
	age := now.Sub(s.created)
	return age >= p.cfg.RekeyAfter || (!s.confirmed.Load() && age >= p.cfg.HandshakeRetry)
}

// startHandshake begins a handshake as initiator unless one began less
// than HandshakeRetry ago; it returns the init message to send (nil:
// none). Called with mu held.
func (p *Port) startHandshake(now time.Time) []byte {
	if p.hs != nil && now.Sub(p.hs.started) < p.cfg.HandshakeRetry {
		return nil
	}
	st, err := noise.NewHandshakeState(noise.Config{CipherSuite: suite, Random: rand.Reader, Pattern: noise.HandshakeXX,
		Initiator: true, Prologue: prologue, StaticKeypair: p.cfg.Static.dh()})
	if err != nil {
		return nil
	}
	hs := &handshake{state: st, local: randomIndex(), started: now}
	out := appendHandshake(make([]byte, 0, initMACLen), msgInit, hs.local, 0)
	out, _, _, err = st.WriteMessage(out, nil)
	if err != nil {
		return nil
	}
	hs.init = out
	p.hs = hs
	return p.cookies.sign(append(make([]byte, 0, initMACLen), out...), now)
}

func (p *Port) send(b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.inner.WriteDatagram(b)
}

// ReadDatagram returns the next authentic datagram, opened, into b. It
// answers handshake messages on the way and drops anything that is not
// authentic, not fresh or not from a listed key.
func (p *Port) ReadDatagram(b []byte) (int, error) {
	if n, ok := p.nextFromBacklog(b); ok {
		return n, nil
	}
	for {
		n, err := p.inner.ReadDatagram(p.rbuf)
		if err != nil {
			return 0, err
		}
		if m, ok := p.input(p.rbuf[:n], b); ok {
			return m, nil
		}
	}
}

// TryReadDatagram is ReadDatagram without blocking (inner must be a
// noc.Poller).
func (p *Port) TryReadDatagram(b []byte) (int, bool, error) {
	pl, ok := p.inner.(noc.Poller)
	if !ok {
		return 0, false, errors.New("secure: inner port cannot be polled")
	}
	if n, ok := p.nextFromBacklog(b); ok {
		return n, true, nil
	}
	for {
		n, ok, err := pl.TryReadDatagram(p.rbuf)
		if err != nil || !ok {
			return 0, ok, err
		}
		if m, ok := p.input(p.rbuf[:n], b); ok {
			return m, true, nil
		}
	}
}

// pending returns the next datagram of the bundle being read, if any,
// copied into b (truncated to len(b)).
func (p *Port) pending(b []byte) (int, bool) {
	if len(p.pend) == 0 {
		return 0, false
	}
	var d []byte
	d, p.pend = nextInBundle(p.pend)
	return copy(b, d), true
}

// SetReadDeadline bounds ReadDatagram.
func (p *Port) SetReadDeadline(t time.Time) error { return p.inner.SetReadDeadline(t) }

// Flush flushes the inner port if it batches writes.
func (p *Port) Flush() error {
	if f, ok := p.inner.(noc.Flusher); ok {
		p.wmu.Lock()
		defer p.wmu.Unlock()
		return f.Flush()
	}
	return nil
}

// Close closes the inner port and forgets the sessions.
func (p *Port) Close() error {
	p.mu.Lock()
	p.cur, p.prev, p.hs, p.resp = nil, nil, nil, nil
	p.mu.Unlock()
	return p.inner.Close()
}

// input handles one datagram from the inner port; ok when it was data
// opened into b (n bytes, truncated to len(b)).
func (p *Port) input(d, b []byte) (int, bool) {
	m := &p.rmsg
	if err := decode(d, m); err != nil {
		p.stats.malformed.Add(1)
		return 0, false
	}
	if m.typ == msgData || m.typ == msgBundle {
		return p.open(m, b)
	}
	now := p.cfg.Now()
	p.mu.Lock()
	reply := p.handshakeInput(m, now)
	p.mu.Unlock()
	if reply != nil {
		_ = p.send(reply)
	}
	return 0, false
}

// open authenticates and opens a data message.
func (p *Port) open(m *message, b []byte) (int, bool) {
	p.mu.Lock()
	var s *session
	switch {
	case p.cur != nil && p.cur.local == m.receiver:
		s = p.cur
	case p.prev != nil && p.prev.local == m.receiver:
		s = p.prev
	}
	var init []byte
	if s == nil && (p.resp == nil || p.resp.local != m.receiver) {
		// a session we do not have (and not one whose finish is still on
		// its way): the peer restarted or we did; start over (paced by
		// HandshakeRetry)
		init = p.startHandshake(p.cfg.Now())
	}
	p.mu.Unlock()
	if init != nil {
		_ = p.send(init)
	}
	if s == nil || s.expired.Load() {
		p.stats.noSession.Add(1)
		return 0, false
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	// the clock is read on every write, and here every expiryCheck
	// datagrams: a session past RejectAfter is refused from then on
	if s.opens++; s.opens%expiryCheck == 0 && p.cfg.Now().Sub(s.created) >= p.cfg.RejectAfter {
		s.expired.Store(true)
		p.stats.noSession.Add(1)
		return 0, false
	}
	if !s.win.check(m.counter) {
		p.stats.replayed.Add(1)
		return 0, false
	}
	plain := len(m.sealed) - tagLen
	var out []byte
	var err error
	if m.typ == msgBundle {
		// opened into the bundle buffer; delivered only whole and well formed
		out, err = s.recv.Decrypt(p.bundle[:0], m.counter, m.header, m.sealed)
		if err != nil {
			p.stats.unauthentic.Add(1)
			return 0, false
		}
		s.win.accept(m.counter)
		if s.initiator && !s.confirmed.Load() {
			s.confirmed.Store(true)
		}
		if !checkBundle(out) {
			p.stats.malformed.Add(1)
			return 0, false
		}
		p.stats.opened.Add(1)
		p.pend = out
		return p.pending(b)
	}
	if plain <= len(b) {
		out, err = s.recv.Decrypt(b[:0], m.counter, m.header, m.sealed)
	} else {
		// too long for b: open in place, then truncate (ReadDatagram's
		// contract)
		out, err = s.recv.Decrypt(m.sealed[:0], m.counter, m.header, m.sealed)
		if err == nil {
			out = out[:copy(b, out)]
		}
	}
	if err != nil {
		p.stats.unauthentic.Add(1)
		return 0, false
	}
	s.win.accept(m.counter)
	if s.initiator && !s.confirmed.Load() {
		s.confirmed.Store(true)
	}
	p.stats.opened.Add(1)
	return len(out), true
}

// handshakeInput advances the handshakes with one message and returns the
// reply to send, if any. Called with mu held.
func (p *Port) handshakeInput(m *message, now time.Time) []byte {
	switch m.typ {
	case msgInit:
		if !p.cookies.valid(m.signed, m.mac, now) && p.cookies.underLoad(float64(p.cfg.HandshakeRate)/4, now) {
			// under load: no public-key work for an init that has not
			// shown it can receive what we send
			p.stats.cookiesSent.Add(1)
			return p.cookies.reply(m.sender, now)
		}
		if !p.allow(now) {
			return nil
		}
		if p.hs != nil && p.hs.local > m.sender {
			// both ends started at once: the larger index stays initiator
			return nil
		}
		st, err := noise.NewHandshakeState(noise.Config{CipherSuite: suite, Random: rand.Reader, Pattern: noise.HandshakeXX,
			Prologue: prologue, StaticKeypair: p.cfg.Static.dh()})
		if err != nil {
			return nil
		}
		if _, _, _, err := st.ReadMessage(nil, m.noise); err != nil {
			p.stats.hsFailures.Add(1)
			return nil
		}
		r := &handshake{state: st, local: randomIndex(), remote: m.sender, started: now}
		out := appendHandshake(make([]byte, 0, responseLen), msgResponse, r.local, r.remote)
		out, _, _, err = st.WriteMessage(out, nil)
		if err != nil {
			return nil
		}
		p.hs = nil // we answer instead
		p.resp = r
		return out
	case msgCookie:
		hs := p.hs
		if hs == nil || m.receiver != hs.local {
			return nil
		}
		p.cookies.take(m.cookie, now)
		p.stats.cookiesTaken.Add(1)
		if hs.cookied {
			return nil // one resend per init; later ones are paced by HandshakeRetry
		}
		hs.cookied = true
		return p.cookies.sign(append(make([]byte, 0, initMACLen), hs.init...), now)
	case msgResponse:
		hs := p.hs
		if hs == nil || m.receiver != hs.local {
			return nil
		}
		if _, _, _, err := hs.state.ReadMessage(nil, m.noise); err != nil {
			p.stats.hsFailures.Add(1)
			p.hs = nil
			return nil
		}
		peer, ok := p.listed(hs.state.PeerStatic())
		if !ok {
			p.hs = nil
			return nil
		}
		out := appendHandshake(make([]byte, 0, finishLen), msgFinish, 0, m.sender)
		out, cs1, cs2, err := hs.state.WriteMessage(out, nil)
		if err != nil || cs1 == nil {
			p.hs = nil
			return nil
		}
		send, err1 := newTransport(cs1)
		recv, err2 := newTransport(cs2)
		if err1 != nil || err2 != nil {
			p.hs = nil
			return nil
		}
		p.install(&session{local: hs.local, remote: m.sender, send: send, recv: recv, created: now, initiator: true, peer: peer})
		p.hs = nil
		return out
	case msgFinish:
		r := p.resp
		if r == nil || m.receiver != r.local {
			return nil
		}
		if !p.allow(now) {
			return nil
		}
		_, cs1, cs2, err := r.state.ReadMessage(nil, m.noise)
		p.resp = nil
		if err != nil || cs1 == nil {
			p.stats.hsFailures.Add(1)
			return nil
		}
		peer, ok := p.listed(r.state.PeerStatic())
		if !ok {
			return nil
		}
		send, err1 := newTransport(cs2)
		recv, err2 := newTransport(cs1)
		if err1 != nil || err2 != nil {
			return nil
		}
		p.install(&session{local: r.local, remote: r.remote, send: send, recv: recv, created: now, peer: peer})
	}
	return nil
}

// listed checks a peer's static key against the fabric.
func (p *Port) listed(static []byte) (PublicKey, bool) {
	var k PublicKey
	if len(static) != KeyLen {
		p.stats.refused.Add(1)
		return k, false
	}
	copy(k[:], static)
	if _, ok := p.cfg.Fabric.Lookup(k); !ok {
		p.stats.refused.Add(1)
		return k, false
	}
	return k, true
}

// install makes s the current session. Called with mu held.
func (p *Port) install(s *session) {
	p.prev, p.cur = p.cur, s
	if p.prev != nil && p.prev.peer != s.peer {
		p.prev = nil // another node now: nothing of the old one is accepted
	}
	p.peer, p.peerOK = s.peer, true
	p.stats.handshakes.Add(1)
}

// allow takes a token of the handshake rate limit. Called with mu held.
func (p *Port) allow(now time.Time) bool {
	rate := float64(p.cfg.HandshakeRate)
	if !p.tokenAt.IsZero() {
		p.tokens = min(rate, p.tokens+now.Sub(p.tokenAt).Seconds()*rate)
	}
	p.tokenAt = now
	if p.tokens < 1 {
		p.stats.rateLimited.Add(1)
		return false
	}
	p.tokens--
	return true
}

func randomIndex() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:]) | 1
}

// Counters are the inner port's counters (if it has any) and this port's
// own, prefixed "secure_".
func (p *Port) Counters() (map[string]uint64, error) {
	out := map[string]uint64{}
	if cp, ok := p.inner.(interface {
		Counters() (map[string]uint64, error)
	}); ok {
		m, err := cp.Counters()
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			out[k] = v
		}
	}
	s := p.Stats()
	for k, v := range map[string]uint64{"sealed": s.Sealed, "opened": s.Opened, "handshakes": s.Handshakes,
		"refused": s.Refused, "rate_limited": s.RateLimited, "replayed": s.Replayed, "unauthentic": s.Unauthentic,
		"malformed": s.Malformed, "no_session": s.NoSession, "dropped_no_session": s.DroppedNoSession,
		"handshake_failures": s.HandshakeFailures, "bundled": s.Bundled,
		"cookies_sent": s.CookiesSent, "cookies_taken": s.CookiesTaken} {
		out["secure_"+k] = v
	}
	return out, nil
}

// ReadyFD is the inner port's (noc.Waitable): it polls readable while the
// inner port holds a datagram, which TryReadDatagram then opens (or
// consumes, if it was a handshake message or not authentic). Datagrams of
// a bundle (or of a batch read) that did not fit the caller's buffers wait
// in the port, not in the descriptor: a driver reads until a read comes
// back empty before it waits on the descriptor, as the agent's loop does.
func (p *Port) ReadyFD() (int, error) {
	w, ok := p.inner.(noc.Waitable)
	if !ok {
		return -1, errors.New("secure: inner port has no ready descriptor")
	}
	return w.ReadyFD()
}
