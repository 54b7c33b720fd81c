package hostif

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/hostif/ring"
)

// TestWakeRingsDrainsOnlyTheBellsThatRang: after a park, the bells the
// driver saw readable are drained and the others are not read at all (an
// idle ring costs no system call per wake-up); a bell rung but not reported
// stays readable for the next park.
func TestWakeRingsDrainsOnlyTheBellsThatRang(t *testing.T) {
	var s Server
	var rgs [2]*connRing
	for i := range rgs {
		p, err := ring.New(ring.Fit(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		memfd, bell := p.TakeHostFDs()
		unix.Close(memfd)
		t.Cleanup(func() {
			unix.Close(bell)
			p.Close()
		})
		if _, err := unix.Write(bell, []byte{1}); err != nil { // the host rings
			t.Fatal(err)
		}
		rgs[i] = &connRing{c: &conn{}, p: p}
		s.rings.add(rgs[i])
	}
	if pending, _ := s.ParkRings(); pending {
		t.Fatal("empty rings reported pending submissions")
	}
	s.WakeRings(func(bell int) bool { return bell == rgs[0].p.Bell() })
	if n := rgs[0].p.DrainBell(); n != 0 {
		t.Errorf("the bell that rang was left with %d wake-ups", n)
	}
	if n := rgs[1].p.DrainBell(); n != 1 {
		t.Errorf("the bell not reported held %d wake-ups, want its 1 kept", n)
	}
	s.WakeRings(nil) // nil: every bell
}
