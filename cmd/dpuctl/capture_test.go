package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
)

// datagram is a link datagram carrying a whole message: one NoC frame.
func datagram(t *testing.T, seq uint32) []byte {
	t.Helper()
	f := noc.Frame{Version: noc.FrameVersion, Class: noc.ClassAtomic, Op: 2, Flags: noc.FlagPath, Src: 1, Dst: 0, Hops: 1,
		RequestID: 77, GVA: gva.GVA{Hi: 0, Lo: 0x1000}, PageVersion: 5, Payload: []byte("0123456789abcdef")}
	msg, err := f.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	h := link.Header{Flags: link.FlagData | link.FlagFirst | link.FlagLast, SrcSession: 0xabc, SrcEpoch: 1, DstSession: 0xdef,
		DstEpoch: 2, Seq: seq, Ack: 9, Credits: 64}
	b := make([]byte, link.HeaderLen+len(msg)+link.TrailerLen)
	n, err := h.Encode(b, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

func ackOnly(t *testing.T) []byte {
	t.Helper()
	h := link.Header{SrcSession: 0xdef, SrcEpoch: 2, DstSession: 0xabc, DstEpoch: 1, Seq: 9, Ack: 42, Credits: 64}
	b := make([]byte, link.HeaderLen+link.TrailerLen)
	n, err := h.Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

const wantFrame = "data 64B [first,last]: atomic/2 1->0 hops=1 req=77 gva:00000000000000000000000000001000 v5 len=16 flags=0x8"

// A capture written as pcapng reads back through capture read.
func TestCapturePcapngRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	frames := []ctl.CapturedFrame{
		{Time: at, Port: "p0", Direction: ctl.Received, Data: datagram(t, 41)},
		{Time: at.Add(time.Millisecond), Port: "p0", Direction: ctl.Sent, Data: ackOnly(t)},
	}
	for i := range frames {
		frames[i].Length = uint32(len(frames[i].Data))
	}
	var file bytes.Buffer
	if err := writePcapng(&file, "p0", frames); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := readCapture(&file, &out); err != nil {
		t.Fatal(err)
	}
	want := "03:04:05.000006 p0 rx link seq 41 ack 9 credits 64 " + wantFrame + "\n" +
		"03:04:05.001006 p0 tx link seq 9 ack 42 credits 64 ack-only\n"
	if out.String() != want {
		t.Errorf("capture read:\n%s\nwant\n%s", out.String(), want)
	}
	// A damaged datagram is said to be one, not decoded as garbage.
	frames[0].Data[len(frames[0].Data)-1] ^= 0xff
	if s := describe(at, "p0", "rx", wrapEthernet(frames[0])); !strings.Contains(s, "not a link datagram") || !strings.Contains(s, "checksum") {
		t.Errorf("bad checksum: %s", s)
	}
}

// udpPcap writes a classic pcap of one UDP link datagram to port 7000.
func udpPcap(t *testing.T, path string, payload []byte) {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(127, 0, 0, 1), DstIP: net.IPv4(127, 0, 0, 1)}
	udp := &layers.UDP{SrcPort: 7001, DstPort: 7000}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriterNanos(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(b), Length: len(b)}, b); err != nil {
		t.Fatal(err)
	}
}

func TestCaptureReadUDP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "udp.pcap")
	udpPcap(t, path, datagram(t, 41))
	out, _, err := dpuctl(t, "capture", "read", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "udp 7001>7000 link seq 41 ack 9 credits 64 "+wantFrame) {
		t.Errorf("capture read of a UDP link: %q", out)
	}
}

// TestCaptureReadStdin: "-" reads the capture from stdin, and a flag may
// follow the file; a second file is refused.
func TestCaptureReadStdin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "udp.pcap")
	udpPcap(t, path, datagram(t, 41))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := dpuctlIn(t, string(b), "capture", "read", "-", "-j")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "udp 7001>7000 link seq 41 ack 9 credits 64 "+wantFrame) {
		t.Errorf("capture read of stdin: %q", out)
	}
	if _, _, err := dpuctl(t, "capture", "read", path, path); !errors.As(err, new(usageError)) {
		t.Errorf("capture read of two files: %v, want a usage error", err)
	}
}

// needTshark skips without tshark, unless DPU_PRIV_TESTS=require (CI
// installs it), which makes that a failure.
func needTshark(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("DPU_PRIV_TESTS") == "require" {
			t.Fatal("tshark not found (.ci/run installs it)")
		}
		t.Skip("tshark not found")
	}
	return p
}

// tsharkFields decodes file with the dissector and prints fields, one line
// per packet.
func tsharkFields(t *testing.T, file string, fields ...string) string {
	t.Helper()
	args := []string{"-n", "-X", "lua_script:" + filepath.Join("..", "..", "deploy", "wireshark", "dpu.lua"), "-r", file, "-T", "fields", "-E", "separator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, needTshark(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no personal preferences
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || strings.Contains(stderr.String(), "Lua") {
		t.Fatalf("tshark %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

var dissectorFields = []string{"dpu_link.seq", "dpu_link.ack", "dpu_link.flags.first", "dpu_noc.class", "dpu_noc.op",
	"dpu_noc.src", "dpu_noc.dst", "dpu_noc.request", "dpu_noc.gva", "dpu_noc.page_version", "dpu_noc.payload_length"}

const wantFields = "41,9,1,2,2,1,0,77,gva:00000000000000000000000000001000,5,16\n"

// The Wireshark dissector decodes what dpuctl writes (ethertype 0x88B5)
// and UDP links, field for field as capture read does.
func TestWiresharkDissector(t *testing.T) {
	needTshark(t)
	dir := t.TempDir()
	ng := filepath.Join(dir, "ether.pcapng")
	frames := []ctl.CapturedFrame{{Time: time.Unix(1, 0), Port: "p0", Direction: ctl.Received, Data: datagram(t, 41)}, {Time: time.Unix(2, 0), Port: "p0", Direction: ctl.Sent, Data: ackOnly(t)}}
	for i := range frames {
		frames[i].Length = uint32(len(frames[i].Data))
	}
	if err := writePcapngFile(ng, "p0", frames); err != nil {
		t.Fatal(err)
	}
	if got := tsharkFields(t, ng, dissectorFields...); got != wantFields+"9,42,0,,,,,,,,\n" {
		t.Errorf("tshark on pcapng:\n%q\nwant\n%q", got, wantFields+"9,42,0,,,,,,,,\n")
	}
	udp := filepath.Join(dir, "udp.pcap")
	udpPcap(t, udp, datagram(t, 41))
	if got := tsharkFields(t, udp, dissectorFields...); got != wantFields {
		t.Errorf("tshark on a UDP link:\n%q\nwant\n%q", got, wantFields)
	}
}

// FuzzReadCapture: capture read takes any file: it answers with lines or
// an error, never a panic (seed corpus in testdata/fuzz/FuzzReadCapture).
func FuzzReadCapture(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		readCapture(bytes.NewReader(b), &out) //nolint:errcheck // only panics matter
	})
}

// TestCaptureReadSealed: a tcpdump capture of a secure link (key-file: the
// links dpu-fabric makes) says the datagrams are sealed, not that their
// link header has an unknown version.
func TestCaptureReadSealed(t *testing.T) {
	sealed := append([]byte{4, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 7}, make([]byte, 48)...) // type data, session, counter, ciphertext+tag
	path := filepath.Join(t.TempDir(), "sealed.pcap")
	udpPcap(t, path, sealed)
	out, _, err := dpuctl(t, "capture", "read", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "udp 7001>7000 secure link: sealed data (session 0x1234, counter 7); sealed, so not decoded") || strings.Contains(out, "version") {
		t.Errorf("capture read of a sealed link: %q", out)
	}
}

// packedDatagram is a link datagram that carries the frames of seqs 41
// and 42 packed (each after its length).
func packedDatagram(t *testing.T) []byte {
	t.Helper()
	var payload []byte
	for _, req := range []uint64{77, 78} {
		f := noc.Frame{Version: noc.FrameVersion, Class: noc.ClassAtomic, Op: 2, Flags: noc.FlagPath, Src: 1, Dst: 0, Hops: 1,
			RequestID: req, GVA: gva.GVA{Hi: 0, Lo: 0x1000}, PageVersion: 5, Payload: []byte("0123456789abcdef")}
		msg, err := f.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		payload = append(payload, byte(len(msg)>>8), byte(len(msg)))
		payload = append(payload, msg...)
	}
	h := link.Header{Flags: link.FlagData | link.FlagFirst | link.FlagLast | link.FlagPacked, SrcSession: 0xabc, SrcEpoch: 1,
		DstSession: 0xdef, DstEpoch: 2, Seq: 43, Ack: 9, Credits: 64}
	b := make([]byte, link.HeaderLen+len(payload)+link.TrailerLen)
	n, err := h.Encode(b, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// TestCaptureReadPacked: capture read shows every frame of a packed
// datagram, and the dissector decodes each of them.
func TestCaptureReadPacked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "udp.pcap")
	udpPcap(t, path, packedDatagram(t))
	out, _, err := dpuctl(t, "capture", "read", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[first,last,packed]: 2 frames", "req=77 ", "req=78 "} {
		if !strings.Contains(out, want) {
			t.Errorf("capture read of a packed datagram: %q, want %q in it", out, want)
		}
	}
	if _, err := exec.LookPath("tshark"); err != nil && os.Getenv("DPU_PRIV_TESTS") != "require" {
		return
	}
	if got := tsharkFields(t, path, "dpu_link.seq", "dpu_link.flags.packed", "dpu_noc.request"); got != "43,1,77,78\n" {
		t.Errorf("tshark on a packed datagram: %q, want %q", got, "43,1,77,78\n")
	}
}
