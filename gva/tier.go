package gva

import "fmt"

// Tier says where a page lives as seen from one host process.
type Tier uint8

// Location tiers, nearest first.
const (
	TierLocal     Tier = iota // in this process's memory (a valid mapped replica)
	TierMachine               // on this machine, held by its DPU
	TierNeighbour             // one DPU hop away
	TierRemote                // more than one hop away
)

var tierNames = [...]string{"local", "machine", "neighbour", "remote"}

func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// TierForHops returns the tier of a page held hops DPU hops away
// (0 = this machine).
func TierForHops(hops int) Tier {
	switch {
	case hops <= 0:
		return TierMachine
	case hops == 1:
		return TierNeighbour
	default:
		return TierRemote
	}
}

// Speed is the storage speed tier of a page beyond the local tier.
type Speed uint8

// Speed tiers, fastest first.
const (
	SpeedMemory   Speed = iota // DRAM
	SpeedFastDisk              // paged fast disk (NVMe)
	SpeedSlowDisk              // slow disk
)

var speedNames = [...]string{"memory", "fast-disk", "slow-disk"}

func (s Speed) String() string {
	if int(s) < len(speedNames) {
		return speedNames[s]
	}
	return fmt.Sprintf("speed(%d)", uint8(s))
}
