package xdp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// umem is the frame area shared with the kernel, split in two halves so the
// receiving and the sending goroutine never share a frame or a lock: frames
// [0, rxFrames) cycle fill → RX → reader → fill, the rest cycle
// free stack → TX → completion → free stack.
type umem struct {
	mem       []byte
	frameSize uint64
	rxFrames  uint32

	rxSpare []uint64 // RX frames held by the reader, not in the fill ring
	txFree  []uint64 // TX frames free to write
}

func newUMEM(mem []byte, frameSize uint64, rxFrames, txFrames uint32) (*umem, error) {
	if frameSize == 0 || frameSize&(frameSize-1) != 0 {
		return nil, fmt.Errorf("xdp: frame size %d is not a power of two", frameSize)
	}
	if need := frameSize * uint64(rxFrames+txFrames); uint64(len(mem)) < need {
		return nil, fmt.Errorf("xdp: UMEM of %d bytes holds fewer than %d frames", len(mem), rxFrames+txFrames)
	}
	u := &umem{
		mem:       mem,
		frameSize: frameSize,
		rxFrames:  rxFrames,
		rxSpare:   make([]uint64, 0, rxFrames),
		txFree:    make([]uint64, 0, txFrames),
	}
	for i := range rxFrames {
		u.rxSpare = append(u.rxSpare, uint64(rxFrames-1-i)*frameSize)
	}
	for i := range txFrames {
		u.txFree = append(u.txFree, uint64(rxFrames+txFrames-1-i)*frameSize)
	}
	return u, nil
}

// frameBase is the start of the frame holding addr.
func (u *umem) frameBase(addr uint64) uint64 { return addr &^ (u.frameSize - 1) }

// bytes returns the region a descriptor names, or false when it leaves its
// frame or the UMEM.
func (u *umem) bytes(d unix.XDPDesc) ([]byte, bool) {
	end := d.Addr + uint64(d.Len)
	if end > uint64(len(u.mem)) || end < d.Addr || (d.Len > 0 && u.frameBase(d.Addr) != u.frameBase(end-1)) {
		return nil, false
	}
	return u.mem[d.Addr:end], true
}

// frame returns the whole frame at base.
func (u *umem) frame(base uint64) []byte { return u.mem[base : base+u.frameSize] }

// isRx reports whether addr lies in the receiving half.
func (u *umem) isRx(addr uint64) bool { return addr < uint64(u.rxFrames)*u.frameSize }

func (u *umem) pushRx(addr uint64) { u.rxSpare = append(u.rxSpare, u.frameBase(addr)) }

func (u *umem) popRx() uint64 {
	a := u.rxSpare[len(u.rxSpare)-1]
	u.rxSpare = u.rxSpare[:len(u.rxSpare)-1]
	return a
}

func (u *umem) pushTx(addr uint64) { u.txFree = append(u.txFree, u.frameBase(addr)) }

func (u *umem) popTx() uint64 {
	a := u.txFree[len(u.txFree)-1]
	u.txFree = u.txFree[:len(u.txFree)-1]
	return a
}
