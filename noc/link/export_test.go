package link

import (
	"time"

	"golang.org/x/sys/unix"
)

// Wait is the reader's wait on its ready set, for the tests: until a
// channel or the bell polls readable, d passes or the port closes.
func (p *StripedPort) Wait(d time.Duration) error {
	return p.wait(make([]unix.EpollEvent, 1), d)
}
