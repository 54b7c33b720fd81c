package agent

import (
	"reflect"
	"testing"
)

// TestPortDevices: the NIC of each kind of port; an address no device
// holds names none.
func TestPortDevices(t *testing.T) {
	got := portDevices([]PortSpec{
		{Name: "a", Kind: PortXDP, Args: []string{"eth1"}},
		{Name: "b", Kind: PortAFPacket, Args: []string{"eth2"}},
		{Name: "c", Kind: PortUDP, Args: []string{"127.0.0.1:7000", "127.0.0.2:7000"}},
		{Name: "d", Kind: PortUDP, Args: []string{"192.0.2.77:7000", "192.0.2.78:7000"}},
		{Name: "e", Kind: PortXDP, Args: []string{"eth1"}},
	})
	if want := []string{"eth1", "eth2", "lo"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("portDevices = %v, want %v", got, want)
	}
}
