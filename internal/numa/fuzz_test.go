package numa

import (
	"testing"
)

// FuzzParseCPUList: any bytes decode or fail; a decoded set is sorted,
// without repeats, within MaxCPU, and its String decodes to itself.
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-3,8,10-11\n", "0-7:2", "", "3-1", "0,,1", "8191", "0-8191:4096"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseCPUList(s)
		if err != nil {
			return
		}
		for i, c := range set {
			if c < 0 || c >= MaxCPU || (i > 0 && set[i-1] >= c) {
				t.Fatalf("ParseCPUList(%q) = %v: not sorted, unique and in range", s, set)
			}
		}
		again, err := ParseCPUList(set.String())
		if err != nil || again.String() != set.String() {
			t.Fatalf("%q: String %q decodes to %v, %v", s, set.String(), again, err)
		}
	})
}

// FuzzParseMeminfo: any bytes decode or fail (an error carries no
// figure), and figures written again as the kernel writes them decode to
// themselves.
func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte(meminfo(0, 16315480, 1048576)))
	f.Add([]byte("Node 1 MemTotal: 5 kB\nNode 1 MemFree: 9\n"))
	f.Add([]byte("Node 0 MemTotal: 18014398509481983 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mi, err := ParseMeminfo(b)
		if err != nil {
			if mi != (Meminfo{}) {
				t.Fatalf("an error with figures: %+v, %v", mi, err)
			}
			return
		}
		if mi.Total%1024 == 0 && mi.Free%1024 == 0 && mi.Total/1024 <= 1<<53 && mi.Free/1024 <= 1<<53 {
			again, err := ParseMeminfo([]byte(meminfo(0, int(mi.Total/1024), int(mi.Free/1024))))
			if err != nil || again != mi {
				t.Fatalf("%+v written again decodes to %+v, %v", mi, again, err)
			}
		}
	})
}
