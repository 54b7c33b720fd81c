package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// bulk is the connection's bulk area, mapped, cut into slots of up to
// bulkSlot bytes: one transfer in flight per slot.
type bulk struct {
	mu      sync.RWMutex // held (read) by a transfer while it uses mem; Close unmaps it
	mem     []byte
	slotLen int
	free    chan int // slot offsets
}

// close unmaps the area once no transfer uses it.
func (b *bulk) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mem != nil {
		_ = unix.Munmap(b.mem)
		b.mem = nil
	}
}

// bulkSlot is the most one transfer moves, bulkArea the size the client
// asks for: bulkArea/bulkSlot transfers in flight.
const (
	bulkSlot = 256 << 10
	bulkArea = 4 * bulkSlot
)

// bulkState is the area, once asked for (nil area: the server offers
// none, and transfers go page by page).
type bulkState struct {
	once sync.Once
	area *bulk
	err  error
}

// area asks the server for the bulk area on first use.
func (c *Client) area(ctx context.Context) (*bulk, error) {
	c.bulk.once.Do(func() {
		res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpBulk}, Bytes: bulkArea})
		if err != nil {
			var e *Error
			if errors.As(err, &e) && (e.Errno == syscall.EINVAL || e.Errno == syscall.ENOSYS || e.Errno == syscall.EOPNOTSUPP) {
				return // a server without bulk areas: page by page
			}
			c.bulk.err = err
			return
		}
		defer res.release()
		if len(res.body) != 8 || len(res.fds) != 1 {
			closeAll(res.fds)
			c.bulk.err = fmt.Errorf("%w: bulk reply of %d bytes with %d descriptors", ErrProtocol, len(res.body), len(res.fds))
			return
		}
		size := int(wire.U64(res.body, 0))
		fd := res.fds[0]
		defer unix.Close(fd)
		if size < wire.PageSize || size > wire.MaxBulkArea {
			c.bulk.err = fmt.Errorf("%w: bulk area of %d bytes", ErrProtocol, size)
			return
		}
		mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			c.bulk.err = fmt.Errorf("hostif client: mapping the bulk area: %w", err)
			return
		}
		slot := min(size, bulkSlot)
		b := &bulk{mem: mem, slotLen: slot, free: make(chan int, size/slot)}
		for off := 0; off+slot <= size; off += slot {
			b.free <- off
		}
		c.bulk.area = b
	})
	return c.bulk.area, c.bulk.err
}

// StoreRange writes src at addr, across as many pages as it covers,
// with transfers of up to 256 KiB (bulkSlot) through the connection's
// bulk area, several in flight (page by page where the server offers no
// bulk area). It returns how many bytes from the start were stored
// before the first error; pages after that one may have been stored too.
func (c *Client) StoreRange(ctx context.Context, addr gva.GVA, src []byte) (int, error) {
	return c.transfer(ctx, wire.OpStoreBulk, addr, src)
}

// LoadRange reads len(dst) bytes at addr into dst, as StoreRange writes.
func (c *Client) LoadRange(ctx context.Context, addr gva.GVA, dst []byte) (int, error) {
	return c.transfer(ctx, wire.OpLoadBulk, addr, dst)
}

func (c *Client) transfer(ctx context.Context, op wire.Op, addr gva.GVA, buf []byte) (int, error) {
	b, err := c.area(ctx)
	if err != nil {
		return 0, err
	}
	if b == nil {
		return c.pageByPage(ctx, op, addr, buf)
	}
	chunk := b.slotLen
	n := (len(buf) + chunk - 1) / chunk
	done := make([]int, n) // bytes done of each chunk
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	// one worker per slot: a bounded window, not a goroutine per request
	for range min(cap(b.free), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				lo, hi := i*chunk, min((i+1)*chunk, len(buf))
				done[i], errs[i] = c.chunk(ctx, b, op, gva.GVA{Hi: addr.Hi, Lo: addr.Lo + uint64(lo)}, buf[lo:hi])
			}
		}()
	}
	wg.Wait()
	total := 0
	for i := range n {
		total += done[i]
		if errs[i] != nil {
			return total, errs[i]
		}
	}
	return total, nil
}

// chunk moves one transfer through a slot of the area.
func (c *Client) chunk(ctx context.Context, b *bulk, op wire.Op, addr gva.GVA, buf []byte) (int, error) {
	var off int
	select {
	case off = <-b.free:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { b.free <- off }()
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.mem == nil {
		return 0, c.closedErr()
	}
	if op == wire.OpStoreBulk {
		copy(b.mem[off:], buf)
	}
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: op, GVA: addr}, Len: uint32(len(buf)), Off: uint32(off)})
	if err != nil {
		return 0, err
	}
	defer res.release()
	if len(res.body) != 16 {
		return 0, fmt.Errorf("%w: %s reply of %d bytes", ErrProtocol, op, len(res.body))
	}
	n, errno := int(wire.U64(res.body, 0)), syscall.Errno(wire.U32(res.body, 8))
	if n > len(buf) {
		return 0, fmt.Errorf("%w: %s of %d bytes says %d done", ErrProtocol, op, len(buf), n)
	}
	if op == wire.OpLoadBulk {
		copy(buf[:n], b.mem[off:off+n])
	}
	if errno != 0 || n < len(buf) {
		if errno == 0 {
			errno = syscall.EIO
		}
		return n, &Error{Op: op, Errno: errno, Text: fmt.Sprintf("%d of %d bytes at %v", n, len(buf), addr)}
	}
	return n, nil
}

// pageByPage is a transfer without a bulk area: a request per page, in
// order.
func (c *Client) pageByPage(ctx context.Context, op wire.Op, addr gva.GVA, buf []byte) (int, error) {
	done := 0
	err := gva.EachPage(addr, len(buf), func(g gva.GVA, from, to int) error {
		var err error
		if op == wire.OpStoreBulk {
			_, err = c.Store(ctx, g, buf[from:to])
		} else {
			_, err = c.Load(ctx, g, buf[from:to])
		}
		if err == nil {
			done = to
		}
		return err
	})
	return done, err
}
