//go:build linux && cgo && rdma

package rdma

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static struct ibv_context *dpu_open(const char *name, int *err) {
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l) { *err = errno; return NULL; }
	struct ibv_context *ctx = NULL;
	*err = ENODEV;
	for (int i = 0; i < n; i++) {
		if (strcmp(ibv_get_device_name(l[i]), name) == 0) {
			ctx = ibv_open_device(l[i]);
			*err = ctx ? 0 : errno;
			break;
		}
	}
	ibv_free_device_list(l);
	return ctx;
}

static int dpu_port(struct ibv_context *ctx, int port, int *active_mtu, uint16_t *lid) {
	struct ibv_port_attr a;
	int r = ibv_query_port(ctx, port, &a);
	if (r) return r;
	*active_mtu = a.active_mtu;
	*lid = a.lid;
	return a.state == IBV_PORT_ACTIVE ? 0 : ENETDOWN;
}

static int dpu_gid(struct ibv_context *ctx, int port, int index, uint8_t *out) {
	union ibv_gid g;
	int r = ibv_query_gid(ctx, port, index, &g);
	if (r) return r;
	memcpy(out, g.raw, 16);
	return 0;
}

static struct ibv_qp *dpu_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, int slots, int inl, int *got_inline) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = slots;
	a.cap.max_recv_wr = slots;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = inl;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (qp) *got_inline = a.cap.max_inline_data;
	return qp;
}

static int dpu_to_init(struct ibv_qp *qp, int port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RESET;
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	if (r) return r;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int dpu_to_rts(struct ibv_qp *qp, int port, int mtu, uint32_t dqpn, uint32_t rpsn, uint32_t spsn,
		const uint8_t *dgid, int sgid_index, uint16_t dlid) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	a.ah_attr.grh.sgid_index = sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.dlid = dlid;
	a.ah_attr.port_num = port;
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (r) return r;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;   // 4.096 us * 2^14 = 67 ms per try
	a.retry_cnt = 7;
	a.rnr_retry = 7;  // a receiver out of posted receives is waited for
	a.sq_psn = spsn;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int dpu_post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

static int dpu_post_send(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey, int inl) {
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
	return ibv_post_send(qp, &wr, &bad);
}

static int dpu_poll(struct ibv_cq *cq, uint64_t *id, int *status, uint32_t *len) {
	struct ibv_wc wc;
	int n = ibv_poll_cq(cq, 1, &wc);
	if (n == 1) {
		*id = wc.wr_id;
		*status = wc.status;
		*len = wc.byte_len;
	}
	return n;
}

static int dpu_arm(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// dpu_wait waits up to timeout_ms for a completion event on ch or a
// wake-up on wakefd: 0 timeout, 1 event, 2 woken, <0 -errno.
static int dpu_wait(struct ibv_comp_channel *ch, int wakefd, int timeout_ms) {
	struct pollfd p[2] = {{ .fd = ch->fd, .events = POLLIN }, { .fd = wakefd, .events = POLLIN }};
	int r = poll(p, 2, timeout_ms);
	if (r < 0) return errno == EINTR ? 0 : -errno;
	if (r == 0) return 0;
	if (p[0].revents & POLLIN) {
		struct ibv_cq *cq;
		void *ctx;
		if (ibv_get_cq_event(ch, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
	}
	if (p[1].revents & POLLIN) {
		uint64_t v;
		if (read(wakefd, &v, sizeof v) < 0) { }
		return 2;
	}
	return 1;
}

static void dpu_wake(int fd) {
	uint64_t one = 1;
	if (write(fd, &one, sizeof one) < 0) { }
}
*/
import "C"

import (
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"
)

// verbs holds one queue pair and everything it needs: device context,
// protection domain, completion queues (send and receive apart, so the
// writer and the reader never share one), a completion channel for the
// receive side, and the registered receive and send rings. Its memory is
// C memory: the device reads and writes it at any time.
type verbs struct {
	ctx      *C.struct_ibv_context
	pd       *C.struct_ibv_pd
	ch       *C.struct_ibv_comp_channel
	scq, rcq *C.struct_ibv_cq
	qp       *C.struct_ibv_qp
	rbuf     unsafe.Pointer
	sbuf     unsafe.Pointer
	rmr, smr *C.struct_ibv_mr
	wake     C.int

	port     int
	pathMTU  int // enum ibv_mtu
	lid      uint16
	gid      [16]byte
	gidIndex int
	slots    int
	slotLen  int
	inline   int
}

func errnoErr(op string, r C.int) error {
	if r < 0 {
		r = -r
	}
	return fmt.Errorf("rdma: %s: %w", op, syscall.Errno(r))
}

// openVerbs opens device dev's port and builds a QP in INIT with every
// receive posted.
func openVerbs(dev string, o Options) (_ *verbs, err error) {
	v := &verbs{port: o.Port, slots: o.Slots, slotLen: o.MTU, gidIndex: o.GIDIndex, wake: -1}
	defer func() {
		if err != nil {
			v.close()
		}
	}()
	cname := C.CString(dev)
	defer C.free(unsafe.Pointer(cname))
	var cerr C.int
	if v.ctx = C.dpu_open(cname, &cerr); v.ctx == nil {
		return nil, fmt.Errorf("rdma: device %q: %w", dev, syscall.Errno(cerr))
	}
	var mtu C.int
	var lid C.uint16_t
	if r := C.dpu_port(v.ctx, C.int(v.port), &mtu, &lid); r != 0 {
		return nil, fmt.Errorf("rdma: device %s port %d: %w", dev, v.port, syscall.Errno(r))
	}
	v.pathMTU, v.lid = int(mtu), uint16(lid)
	if err := v.pickGID(); err != nil {
		return nil, fmt.Errorf("rdma: device %s: %w", dev, err)
	}
	if v.pd, err = C.ibv_alloc_pd(v.ctx); v.pd == nil {
		return nil, fmt.Errorf("rdma: alloc pd: %w", err)
	}
	if v.ch, err = C.ibv_create_comp_channel(v.ctx); v.ch == nil {
		return nil, fmt.Errorf("rdma: completion channel: %w", err)
	}
	if v.scq, err = C.ibv_create_cq(v.ctx, C.int(v.slots), nil, nil, 0); v.scq == nil {
		return nil, fmt.Errorf("rdma: send cq: %w", err)
	}
	if v.rcq, err = C.ibv_create_cq(v.ctx, C.int(v.slots), nil, v.ch, 0); v.rcq == nil {
		return nil, fmt.Errorf("rdma: receive cq: %w", err)
	}
	var inl C.int
	if v.qp, err = C.dpu_create_qp(v.pd, v.scq, v.rcq, C.int(v.slots), C.int(o.Inline), &inl); v.qp == nil {
		return nil, fmt.Errorf("rdma: create RC qp: %w", err)
	}
	v.inline = int(inl)
	size := C.size_t(v.slots * v.slotLen)
	v.rbuf, v.sbuf = C.calloc(1, size), C.calloc(1, size)
	if v.rbuf == nil || v.sbuf == nil {
		return nil, fmt.Errorf("rdma: ring memory: %w", syscall.ENOMEM)
	}
	if v.rmr, err = C.ibv_reg_mr(v.pd, v.rbuf, size, C.IBV_ACCESS_LOCAL_WRITE); v.rmr == nil {
		return nil, fmt.Errorf("rdma: register receive ring: %w", err)
	}
	if v.smr, err = C.ibv_reg_mr(v.pd, v.sbuf, size, 0); v.smr == nil {
		return nil, fmt.Errorf("rdma: register send ring: %w", err)
	}
	var fd C.int
	if fd, err = C.eventfd(0, C.EFD_NONBLOCK|C.EFD_CLOEXEC); fd < 0 {
		return nil, fmt.Errorf("rdma: eventfd: %w", err)
	}
	v.wake = fd
	if err := v.reset(); err != nil {
		return nil, err
	}
	return v, nil
}

// pickGID chooses the GID: the configured index, or the first IPv4-mapped
// GID (RoCE v2 over the netdev's IPv4 address), or the first non-zero one.
func (v *verbs) pickGID() error {
	var g [16]byte
	if v.gidIndex >= 0 {
		if r := C.dpu_gid(v.ctx, C.int(v.port), C.int(v.gidIndex), (*C.uint8_t)(&g[0])); r != 0 {
			return fmt.Errorf("gid %d: %w", v.gidIndex, syscall.Errno(r))
		}
		if g == ([16]byte{}) {
			return fmt.Errorf("gid %d is empty", v.gidIndex)
		}
		v.gid = g
		return nil
	}
	first := -1
	for i := 0; i < 16; i++ {
		if C.dpu_gid(v.ctx, C.int(v.port), C.int(i), (*C.uint8_t)(&g[0])) != 0 || g == ([16]byte{}) {
			continue
		}
		if netip.AddrFrom16(g).Is4In6() {
			v.gid, v.gidIndex = g, i
			return nil
		}
		if first < 0 {
			first, v.gid = i, g
		}
	}
	if first < 0 {
		return fmt.Errorf("port %d has no GID (is the netdev up with an address?)", v.port)
	}
	v.gidIndex = first
	return nil
}

// reset moves the QP to RESET then INIT, drops every completion and posts
// every receive slot. The caller excludes the reader and the writer.
func (v *verbs) reset() error {
	if r := C.dpu_to_init(v.qp, C.int(v.port)); r != 0 {
		return errnoErr("qp to init", r)
	}
	for {
		if _, _, _, ok := v.poll(v.scq); !ok {
			break
		}
	}
	for {
		if _, _, _, ok := v.poll(v.rcq); !ok {
			break
		}
	}
	for i := range v.slots {
		if err := v.postRecv(i); err != nil {
			return err
		}
	}
	return nil
}

// connect moves the QP to RTR and RTS toward peer.
func (v *verbs) connect(peer *Handle, psn uint32) error {
	g := peer.GID.As16()
	mtu := v.pathMTU
	r := C.dpu_to_rts(v.qp, C.int(v.port), C.int(mtu), C.uint32_t(peer.QPN), C.uint32_t(peer.PSN), C.uint32_t(psn),
		(*C.uint8_t)(&g[0]), C.int(v.gidIndex), C.uint16_t(peer.LID))
	if r != 0 {
		return errnoErr("qp to rtr/rts", r)
	}
	return nil
}

func (v *verbs) qpn() uint32 { return uint32(v.qp.qp_num) }

func (v *verbs) slot(buf unsafe.Pointer, i int) unsafe.Pointer {
	return unsafe.Add(buf, i*v.slotLen)
}

func (v *verbs) postRecv(i int) error {
	if r := C.dpu_post_recv(v.qp, C.uint64_t(i), v.slot(v.rbuf, i), C.uint32_t(v.slotLen), v.rmr.lkey); r != 0 {
		return errnoErr("post receive", r)
	}
	return nil
}

// postSend sends b: inline (the device copies it during the call) when it
// fits, else from send slot i.
func (v *verbs) postSend(b []byte, i int, id uint64) error {
	var r C.int
	if len(b) <= v.inline {
		r = C.dpu_post_send(v.qp, C.uint64_t(id), unsafe.Pointer(unsafe.SliceData(b)), C.uint32_t(len(b)), 0, 1)
	} else {
		dst := v.slot(v.sbuf, i)
		copy(unsafe.Slice((*byte)(dst), v.slotLen), b)
		r = C.dpu_post_send(v.qp, C.uint64_t(id), dst, C.uint32_t(len(b)), v.smr.lkey, 0)
	}
	if r != 0 {
		return errnoErr("post send", r)
	}
	return nil
}

// poll takes one completion from cq.
func (v *verbs) poll(cq *C.struct_ibv_cq) (id uint64, status int, n int, ok bool) {
	var cid C.uint64_t
	var cst C.int
	var cn C.uint32_t
	if C.dpu_poll(cq, &cid, &cst, &cn) != 1 {
		return 0, 0, 0, false
	}
	return uint64(cid), int(cst), int(cn), true
}

// received returns receive slot i's first n bytes.
func (v *verbs) received(i, n int) []byte {
	return unsafe.Slice((*byte)(v.slot(v.rbuf, i)), min(n, v.slotLen))
}

// arm asks for an event at the next receive completion.
func (v *verbs) arm() error {
	if r := C.dpu_arm(v.rcq); r != 0 {
		return errnoErr("arm cq", r)
	}
	return nil
}

// wait blocks up to ms milliseconds for a receive event or a wake-up.
func (v *verbs) wait(ms int) error {
	if r := C.dpu_wait(v.ch, v.wake, C.int(ms)); r < 0 {
		return errnoErr("wait", r)
	}
	return nil
}

func (v *verbs) wakeUp() {
	if v.wake >= 0 {
		C.dpu_wake(v.wake)
	}
}

// wcSuccess is IBV_WC_SUCCESS; wcFlush IBV_WC_WR_FLUSH_ERR.
const (
	wcSuccess = int(C.IBV_WC_SUCCESS)
	wcFlush   = int(C.IBV_WC_WR_FLUSH_ERR)
)

func wcStatus(s int) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(s)))
}

// close releases everything, in reverse order.
func (v *verbs) close() {
	if v.qp != nil {
		C.ibv_destroy_qp(v.qp)
	}
	if v.smr != nil {
		C.ibv_dereg_mr(v.smr)
	}
	if v.rmr != nil {
		C.ibv_dereg_mr(v.rmr)
	}
	if v.rcq != nil {
		C.ibv_destroy_cq(v.rcq)
	}
	if v.scq != nil {
		C.ibv_destroy_cq(v.scq)
	}
	if v.ch != nil {
		C.ibv_destroy_comp_channel(v.ch)
	}
	if v.pd != nil {
		C.ibv_dealloc_pd(v.pd)
	}
	if v.ctx != nil {
		C.ibv_close_device(v.ctx)
	}
	C.free(v.rbuf)
	C.free(v.sbuf)
	if v.wake >= 0 {
		C.close(v.wake)
	}
	*v = verbs{wake: -1}
}
