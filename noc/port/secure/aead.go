package secure

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"

	"github.com/flynn/noise"
)

// transport is one direction's AEAD of a session: AES-256-GCM with the
// Noise AESGCM nonce (4 zero bytes, then the counter big-endian), built
// from the handshake's cipher state key. It is the same cipher as
// noise.CipherAESGCM with a nonce buffer of its own, so sealing and
// opening allocate nothing. One direction is used by one goroutine at a
// time (the writer under wmu, the reader under the session's rmu).
type transport struct {
	aead  cipher.AEAD
	nonce *[12]byte
}

func newTransport(cs *noise.CipherState) (transport, error) {
	k := cs.UnsafeKey()
	b, err := aes.NewCipher(k[:])
	if err != nil {
		return transport{}, err
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		return transport{}, err
	}
	return transport{aead: g, nonce: new([12]byte)}, nil
}

func (t transport) Encrypt(out []byte, n uint64, ad, plaintext []byte) []byte {
	binary.BigEndian.PutUint64(t.nonce[4:], n)
	return t.aead.Seal(out, t.nonce[:], plaintext, ad)
}

func (t transport) Decrypt(out []byte, n uint64, ad, ciphertext []byte) ([]byte, error) {
	binary.BigEndian.PutUint64(t.nonce[4:], n)
	return t.aead.Open(out, t.nonce[:], ciphertext, ad)
}
