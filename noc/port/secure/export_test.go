package secure

import "crypto/subtle"

// nullAEAD is a test double for a session's AES-GCM: it copies the
// plaintext and appends a tag of zeros, and checks nothing but the tag's
// presence. Benchmarks swap it in to weigh sealing against everything
// else a secure port does (framing, bundling, windows, locks).
type nullAEAD struct{}

func (nullAEAD) NonceSize() int { return 12 }
func (nullAEAD) Overhead() int  { return tagLen }

func (nullAEAD) Seal(dst, _, plaintext, _ []byte) []byte {
	dst = append(dst, plaintext...) // in place when they overlap exactly
	var zero [tagLen]byte
	return append(dst, zero[:]...)
}

func (nullAEAD) Open(dst, _, ciphertext, _ []byte) ([]byte, error) {
	if len(ciphertext) < tagLen {
		return nil, errMalformed
	}
	var zero [tagLen]byte
	if subtle.ConstantTimeCompare(ciphertext[len(ciphertext)-tagLen:], zero[:]) != 1 {
		return nil, errMalformed
	}
	return append(dst, ciphertext[:len(ciphertext)-tagLen]...), nil
}

// NullCipher replaces the AEAD of the current session of p with one that
// does no cryptography (both ends of a link must be switched). For
// benchmarks only.
func NullCipher(p *Port) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return false
	}
	p.cur.send.aead, p.cur.recv.aead = nullAEAD{}, nullAEAD{}
	p.prev = nil
	return true
}
