package hostiftest

import (
	"time"

	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/wire"
)

// epoch is the test fabric's one clock: its nodes share the process.
var epoch = time.Now()

var _ hostif.ClusterClock = (*Node)(nil)

// ClusterTime implements hostif.ClusterClock: every node of the test
// fabric reads the same clock exactly (machine 1's, error 0).
func (n *Node) ClusterTime() wire.ClusterTime {
	return wire.ClusterTime{Time: int64(time.Since(epoch)), Ref: 1}
}
