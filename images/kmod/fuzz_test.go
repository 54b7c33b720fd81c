package kmod

import (
	"bytes"
	"testing"
)

// FuzzParseModinfo: any section contents either parse to a named module
// with clean dependency names or fail with ErrModule.
func FuzzParseModinfo(f *testing.F) {
	f.Add([]byte("name=virtio_net\x00depends=net_failover\x00vermagic=6.1.0 SMP\x00"))
	f.Add([]byte("depends=,,a-b\x00name=x-y\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mi, err := ParseModinfo(b)
		if err != nil {
			return
		}
		if mi.Name == "" || mi.Name != Normalize(mi.Name) {
			t.Fatalf("bad name %q", mi.Name)
		}
		for _, d := range mi.Depends {
			if d == "" || d != Normalize(d) {
				t.Fatalf("bad dependency %q", d)
			}
		}
	})
}

// FuzzReadModinfo feeds arbitrary files to the ELF reader.
func FuzzReadModinfo(f *testing.F) {
	f.Add(fakeModule("failover", nil, "6.1.0 SMP"))
	f.Add(fakeModule("virtio_net", []string{"net_failover"}, "6.1.0 SMP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mi, err := ReadModinfo(bytes.NewReader(b))
		if err == nil && mi.Name == "" {
			t.Fatal("accepted a module without a name")
		}
	})
}
