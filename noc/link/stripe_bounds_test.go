package link_test

import (
	"errors"
	"testing"

	"github.com/aitherion/dpu/noc/link"
)

// TestStripeConfigMTUAtItsBounds checks that the smallest and largest MTU a
// stripe's channel can carry are accepted, and one past each refused.
func TestStripeConfigMTUAtItsBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		mtu  int
		ok   bool
	}{
		{"ChannelOverhead+MinMTU", link.ChannelOverhead + link.MinMTU, true},
		{"ChannelOverhead+MinMTU-1", link.ChannelOverhead + link.MinMTU - 1, false},
		{"MaxMTU", link.MaxMTU, true},
		{"MaxMTU+1", link.MaxMTU + 1, false},
	} {
		c := stripeConfig(2, 1)
		c.MTU = tc.mtu
		err := c.Validate()
		if tc.ok && err != nil {
			t.Errorf("%s: MTU %d refused: %v", tc.name, tc.mtu, err)
		}
		if !tc.ok && !errors.Is(err, link.ErrConfig) {
			t.Errorf("%s: MTU %d: got %v, want ErrConfig", tc.name, tc.mtu, err)
		}
	}
}
