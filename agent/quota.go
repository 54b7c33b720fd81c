package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/quota"
	"github.com/aitherion/dpu/internal/rundir"
)

// hostMaxConns is the host socket's connection bound (hostif's default).
const hostMaxConns = 1024

// agentOwnFiles are the descriptors the agent keeps out of its users'
// budget: its ports and their channels, the control and metrics
// sockets and their connections, logs, the page log.
const agentOwnFiles = 256

// fileBudget returns the descriptors the host socket may hold for users
// (connections, ring pairs, mapped replica files) and the part of them
// kept for root and the agent's user: the descriptor limit less what the
// agent keeps for itself, so that no mix of users' maps and connections
// runs the agent out of descriptors.
func fileBudget() (total, reserve int) {
	var lim unix.Rlimit
	n := 1024
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
		n = int(min(lim.Cur, 1<<24))
	}
	total = max(n-agentOwnFiles, 64)
	return total, max(16, total/16)
}

// quotaFile keeps the per-uid quotas set with dpuctl quota set, in the
// state directory, so that they outlive a restart.
const quotaFile = "quotas.json"

// hostQuotas is the agent's per-uid ledger of the host socket, made once.
type hostQuotas struct {
	once   sync.Once
	ledger *quota.Ledger
	err    error      // reading the quota file
	mu     sync.Mutex // serialises sets and their writes
}

// hostQuota is the per-uid ledger of the host socket: connections and
// allocated pages and bytes, with the quotas the state directory keeps.
// Root and the agent's own user are not limited per uid and may use the
// reserve.
func (a *Agent) hostQuota() *quota.Ledger {
	q := &a.quotas
	q.once.Do(func() {
		pages := a.cfg.UserPages
		if pages <= 0 {
			pages = max(1, a.capacityPages()/2)
		}
		conns := a.cfg.UserConns
		if conns <= 0 {
			conns = 64
		}
		files, reserve := fileBudget()
		perUser := a.cfg.UserFiles
		if perUser <= 0 {
			perUser = max(16, files/8)
		}
		q.ledger = quota.New(map[quota.Kind]quota.Limit{
			quota.Conns: {PerUID: conns, Total: hostMaxConns, Reserve: 64},
			quota.Files: {PerUID: perUser, Total: files, Reserve: reserve},
			quota.Pages: {PerUID: pages, Total: a.capacityPages(), Reserve: a.capacityPages() / 16},
			quota.Bytes: {PerUID: pages * gva.PageSize},
		}, uint32(os.Geteuid()))
		// backup copies kept for other nodes (pagecharge.go): bounded by
		// the ordinary users' part of the node, not by a user's share
		q.ledger.SetLimit(quota.Remote, quota.Pages, a.capacityPages())
		q.err = a.loadQuotas(q.ledger)
		if q.err != nil {
			a.log.Warn("quotas not restored", "err", q.err)
		}
	})
	return q.ledger
}

// savedQuota is one line of the quota file.
type savedQuota struct {
	UID   uint32 `json:"uid"`
	Pages int    `json:"pages,omitempty"`
	Bytes int    `json:"bytes,omitempty"`
}

func (a *Agent) quotaPath() string { return filepath.Join(a.statePath(), quotaFile) }

// loadQuotas applies the quota file, if there is one.
func (a *Agent) loadQuotas(l *quota.Ledger) error {
	b, err := os.ReadFile(a.quotaPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var saved []savedQuota
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("%s: %w", a.quotaPath(), err)
	}
	for _, s := range saved {
		if s.Pages < 0 || s.Bytes < 0 {
			return fmt.Errorf("%s: uid %d: negative limit", a.quotaPath(), s.UID)
		}
		l.SetLimit(s.UID, quota.Pages, s.Pages)
		l.SetLimit(s.UID, quota.Bytes, s.Bytes)
	}
	return nil
}

// maxQuota bounds a limit (a page count or a byte count that fits an int
// on every platform the agent runs on).
const maxQuota = 1 << 52

// setQuota sets one uid's quota and writes the file.
func (a *Agent) setQuota(q ctl.Quota) error {
	if q.Default {
		return fmt.Errorf("quota set: the defaults come from the configuration (user-pages): %w", syscall.EINVAL)
	}
	if q.PagesLimit > maxQuota || q.BytesLimit > maxQuota {
		return fmt.Errorf("quota set: a limit over %d: %w", uint64(maxQuota), syscall.EINVAL)
	}
	l := a.hostQuota()
	qs := &a.quotas
	qs.mu.Lock()
	defer qs.mu.Unlock()
	oldPages, oldBytes := l.Override(q.UID, quota.Pages), l.Override(q.UID, quota.Bytes)
	l.SetLimit(q.UID, quota.Pages, int(q.PagesLimit))
	l.SetLimit(q.UID, quota.Bytes, int(q.BytesLimit))
	var saved []savedQuota
	for _, uid := range l.UIDs() {
		p, b := l.Override(uid, quota.Pages), l.Override(uid, quota.Bytes)
		if p != 0 || b != 0 {
			saved = append(saved, savedQuota{UID: uid, Pages: p, Bytes: b})
		}
	}
	data, err := json.MarshalIndent(saved, "", "  ")
	if err == nil {
		err = rundir.WriteFile(a.quotaPath(), append(data, '\n'), 0o600, -1, -1)
	}
	if err != nil {
		// not kept: not set either
		l.SetLimit(q.UID, quota.Pages, oldPages)
		l.SetLimit(q.UID, quota.Bytes, oldBytes)
		return fmt.Errorf("quota set: %w", err)
	}
	a.log.Info("quota set", "uid", q.UID, "pages", q.PagesLimit, "bytes", q.BytesLimit)
	return nil
}

// quotaObjects are the default and every uid that holds pages or has a
// quota.
func (a *Agent) quotaObjects() []ctl.Object {
	l := a.hostQuota()
	out := []ctl.Object{&ctl.Quota{Default: true,
		PagesLimit: uint64(l.Default(quota.Pages)), BytesLimit: uint64(l.Default(quota.Bytes))}}
	for _, uid := range l.UIDs() {
		q := &ctl.Quota{UID: uid, Privileged: l.Privileged(uid),
			PagesUsed: uint64(l.Used(uid, quota.Pages)), BytesUsed: uint64(l.Used(uid, quota.Bytes))}
		if !q.Privileged {
			q.PagesLimit, q.BytesLimit = uint64(l.Override(uid, quota.Pages)), uint64(l.Override(uid, quota.Bytes))
			if q.PagesLimit == 0 {
				q.PagesLimit = uint64(l.Default(quota.Pages))
			}
			if q.BytesLimit == 0 {
				q.BytesLimit = uint64(l.Default(quota.Bytes))
			}
		}
		if q.PagesUsed == 0 && q.BytesUsed == 0 && q.PagesLimit == 0 && q.BytesLimit == 0 {
			continue
		}
		out = append(out, q)
	}
	return out
}
