package secure

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Cookies, after WireGuard's: a flood of forged inits must not keep a
// real neighbour out. An init costs the responder public-key work, and the
// rate limit that bounds that work would otherwise be spent on the
// forgeries, so a responder under load answers an init that carries no
// valid mac with a cookie message instead of a response, sent to the
// port's remote address, which only the real neighbour (or someone on
// its path) receives. The initiator sends its init again at once with a
// mac made with the cookie, and keeps using the cookie for its inits
// while it is fresh; inits with a valid mac are served from the rate
// limit, which forged ones no longer reach. A cookie is an HMAC of a
// secret the responder draws at random and replaces every cookieRotate
// (the previous one stays good until the next replacement), so it proves
// that its holder received something from this port lately, nothing
// more.
//
// Under load: more than HandshakeRate/4 inits without a valid mac arrived
// in about the last second (a meter that decays at that rate and is held
// at twice it, so it clears within a second of a flood's end). A
// neighbour's handshakes, a few per rekey interval, never get near it.

// cookieRotate is how long a cookie secret is used; a cookie is accepted
// for up to two of them and an initiator uses one for one.
const cookieRotate = 2 * time.Minute

var cookieLabel = []byte("dpu noc link v1 cookie")

// cookies is a responder's cookie secrets and load meter, and an
// initiator's cookie from the neighbour. Guarded by the Port's mu.
type cookies struct {
	cur, prev [cookieLen]byte // the cookies of the current and previous secret
	rotated   time.Time
	havePrev  bool

	load   float64 // inits without a valid mac, decayed
	loadAt time.Time

	theirs    [cookieLen]byte // the neighbour's cookie, for our inits
	theirsAt  time.Time
	haveTheir bool
}

// rotate draws a new secret when the current one is cookieRotate old.
func (c *cookies) rotate(now time.Time) {
	if !c.rotated.IsZero() && now.Sub(c.rotated) < cookieRotate {
		return
	}
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	c.prev, c.havePrev = c.cur, !c.rotated.IsZero()
	m := hmac.New(sha256.New, secret[:])
	m.Write(cookieLabel)
	copy(c.cur[:], m.Sum(nil))
	c.rotated = now
}

// valid reports whether mac is an init's mac made with one of our
// cookies.
func (c *cookies) valid(init, mac []byte, now time.Time) bool {
	if mac == nil {
		return false
	}
	c.rotate(now)
	if hmac.Equal(initMAC(c.cur[:], init), mac) {
		return true
	}
	return c.havePrev && hmac.Equal(initMAC(c.prev[:], init), mac)
}

// underLoad counts an init without a valid mac and reports whether the
// port is under load (see above).
func (c *cookies) underLoad(rate float64, now time.Time) bool {
	if !c.loadAt.IsZero() {
		c.load = max(0, c.load-now.Sub(c.loadAt).Seconds()*rate)
	}
	c.loadAt = now
	c.load = min(c.load+1, 2*rate)
	return c.load > rate
}

// reply is the cookie message for an init from sender.
func (c *cookies) reply(sender uint32, now time.Time) []byte {
	c.rotate(now)
	b := make([]byte, 0, cookieMsgLen)
	b = append(b, msgCookie)
	b = binary.BigEndian.AppendUint32(b, sender)
	return append(b, c.cur[:]...)
}

// take keeps the neighbour's cookie.
func (c *cookies) take(cookie []byte, now time.Time) {
	copy(c.theirs[:], cookie)
	c.theirsAt, c.haveTheir = now, true
}

// sign appends the mac of init (initLen bytes) made with the neighbour's
// cookie, while one is fresh.
func (c *cookies) sign(init []byte, now time.Time) []byte {
	if !c.haveTheir || now.Sub(c.theirsAt) >= cookieRotate {
		c.haveTheir = false
		return init
	}
	return append(init, initMAC(c.theirs[:], init[:initLen])...)
}

func initMAC(cookie, init []byte) []byte {
	m := hmac.New(sha256.New, cookie)
	m.Write(init)
	return m.Sum(nil)[:macLen]
}
