package agent

import (
	"os"

	"github.com/aitherion/dpu/internal/quota"
)

// hostMaxConns is the host socket's connection bound (hostif's default).
const hostMaxConns = 1024

// hostQuota is the per-uid ledger of the host socket: connections and
// allocated pages. Root and the agent's own user are not limited per uid
// and may use the reserve.
func (a *Agent) hostQuota() *quota.Ledger {
	pages := a.cfg.UserPages
	if pages <= 0 {
		pages = max(1, a.cfg.Pages/2)
	}
	conns := a.cfg.UserConns
	if conns <= 0 {
		conns = 64
	}
	return quota.New(map[quota.Kind]quota.Limit{
		quota.Conns: {PerUID: conns, Total: hostMaxConns, Reserve: 64},
		quota.Pages: {PerUID: pages, Total: a.cfg.Pages, Reserve: a.cfg.Pages / 16},
	}, uint32(os.Geteuid()))
}
