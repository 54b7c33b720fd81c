package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/secure"
)

// Packet capture. The agent copies the datagrams of one port (ctl
// CmdCapture); dpuctl writes them as pcapng, each wrapped in an Ethernet
// header with ethertype 0x88B5 as on a real link (the datagram itself is
// the link layer's: header, one fragment of a NoC frame, CRC32C), with the
// port as the interface and the direction in the packet's flags. capture
// read decodes such files, and pcap/pcapng files of UDP links, with the
// link header below and the NoC frame (noc's gopacket layer) above it.

// layerTypeLink is the gopacket layer of a link datagram; Ethernet type
// 0x88B5 decodes to it, and it decodes a whole message's payload to noc's
// frame layer.
var layerTypeLink = gopacket.RegisterLayerType(int(noc.EtherType)+1, gopacket.LayerTypeMetadata{
	Name:    "DPULink",
	Decoder: gopacket.DecodeFunc(decodeLink),
})

func init() {
	layers.EthernetTypeMetadata[noc.EtherType] = layers.EnumMetadata{DecodeWith: layerTypeLink, Name: "DPULink", LayerType: layerTypeLink}
}

// linkLayer is a decoded link datagram.
type linkLayer struct {
	layers.BaseLayer
	Header link.Header
}

func (l *linkLayer) LayerType() gopacket.LayerType { return layerTypeLink }

func decodeLink(data []byte, p gopacket.PacketBuilder) error {
	l := &linkLayer{}
	payload, err := l.Header.Decode(data)
	if err != nil {
		return err
	}
	l.Contents, l.Payload = data, payload
	p.AddLayer(l)
	if l.Header.Flags&link.FlagPacked != 0 {
		return p.NextDecoder(gopacket.LayerTypePayload) // several frames: describeLink reads them
	}
	if whole := link.FlagData | link.FlagFirst | link.FlagLast; l.Header.Flags&whole == whole {
		return p.NextDecoder(noc.LayerTypeFrame)
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// Addresses of the Ethernet header a captured datagram is written with:
// "local" is the captured port, "peer" its neighbour.
var (
	macLocal = []byte{0x02, 'd', 'p', 'u', 0, 1}
	macPeer  = []byte{0x02, 'd', 'p', 'u', 0, 2}
)

// linkCapture is dpuctl link capture PORT [-c N] [-w FILE] [--timeout D] [--snaplen N] [--plaintext].
// Capture is for root, the agent's user and the agent's capture-group;
// the group sees datagrams as they cross the wire (sealed on a secured
// link), and only root may ask for them in plaintext.
func linkCapture(e *env, args []string) error {
	var (
		port    string
		count   uint
		file    string
		timeout time.Duration
		snaplen uint
		plain   bool
	)
	define := func(fs *flag.FlagSet) {
		fs.UintVar(&count, "c", 100, "datagrams to capture")
		fs.StringVar(&file, "w", "", "write pcapng to this file (- for stdout)")
		fs.DurationVar(&timeout, "timeout", 10*time.Second, "stop after this long")
		fs.UintVar(&snaplen, "snaplen", 0, "bytes kept of each datagram (0: all)")
		fs.BoolVar(&plain, "plaintext", false, "on a secured link, the datagrams above the seal (root only)")
	}
	// PORT may stand before, between or after the flags.
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") && port == "" {
			if i == 0 || !flagTakesValue(args[i-1]) {
				port = a
				continue
			}
		}
		rest = append(rest, a)
	}
	if err := commandFlags(e, "link capture", rest, define); err != nil {
		return err
	}
	switch {
	case port == "":
		return usagef("link capture: want PORT (dpuctl link show lists them)")
	case count == 0 || count > ctl.MaxCaptureCount:
		return usagef("link capture: -c %d: want 1 to %d", count, ctl.MaxCaptureCount)
	case timeout <= 0 || timeout > ctl.MaxCaptureTimeout:
		return usagef("link capture: --timeout %v: want up to %v", timeout, ctl.MaxCaptureTimeout)
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(e.ctx, timeout+10*time.Second)
	defer cancel()
	fmt.Fprintf(e.stderr, "dpuctl: capturing up to %d datagrams of %s for at most %v\n", count, port, timeout)
	frames, err := c.Capture(ctx, ctl.CaptureRequest{Port: port, Count: uint32(count), Timeout: timeout, SnapLen: uint32(snaplen), Plaintext: plain})
	if err != nil {
		return err
	}
	switch {
	case file == "-":
		err = writePcapng(e.stdout, port, frames)
	case file != "":
		err = writePcapngFile(file, port, frames)
	case e.json:
		return e.writeJSON(nonNil(frames))
	default:
		for _, f := range frames {
			io.WriteString(e.stdout, describe(f.Time, f.Port, f.Direction.String(), wrapEthernet(f)))
		}
	}
	if err != nil {
		return err
	}
	sealed := ""
	if len(frames) > 0 && frames[0].Sealed {
		sealed = " (sealed, as on the wire; --plaintext shows them opened)"
	}
	if len(frames) > 0 && frames[0].Redacted {
		sealed = " (payloads zeroed: the capture group sees headers only on a link without key-file)"
	}
	fmt.Fprintf(e.stderr, "dpuctl: %d datagrams captured%s\n", len(frames), sealed)
	return nil
}

func flagTakesValue(a string) bool {
	switch strings.TrimLeft(a, "-") {
	case "c", "w", "timeout", "snaplen", "s":
		return true
	}
	return false
}

func writePcapngFile(path, port string, frames []ctl.CapturedFrame) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writePcapng(f, port, frames); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writePcapng writes frames as pcapng: one interface (the port), Ethernet
// link type, nanosecond timestamps, direction flags.
func writePcapng(w io.Writer, port string, frames []ctl.CapturedFrame) error {
	bw := bufio.NewWriter(w)
	ng, err := pcapgo.NewNgWriterInterface(bw, pcapgo.NgInterface{
		Name: port, Description: "dpu-agent port " + port, LinkType: layers.LinkTypeEthernet, TimestampResolution: 9,
	}, pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "dpuctl link capture"}})
	if err != nil {
		return fmt.Errorf("pcapng: %w", err)
	}
	for _, f := range frames {
		data := wrapEthernet(f)
		dir := pcapgo.NgEpbFlagDirectionInbound
		if f.Direction == ctl.Sent {
			dir = pcapgo.NgEpbFlagDirectionOutbound
		}
		ci := gopacket.CaptureInfo{Timestamp: f.Time, CaptureLength: len(data), Length: 14 + max(int(f.Length), len(f.Data))}
		if err := ng.WritePacketWithOptions(ci, data, pcapgo.NgPacketOptions{Flags: &pcapgo.NgEpbFlags{Direction: dir}}); err != nil {
			return fmt.Errorf("pcapng: %w", err)
		}
	}
	if err := ng.Flush(); err != nil {
		return fmt.Errorf("pcapng: %w", err)
	}
	return bw.Flush()
}

// wrapEthernet puts the Ethernet header of a real link in front of a
// captured datagram.
func wrapEthernet(f ctl.CapturedFrame) []byte {
	src, dst := macPeer, macLocal
	if f.Direction == ctl.Sent {
		src, dst = macLocal, macPeer
	}
	b := make([]byte, 0, 14+len(f.Data))
	b = append(append(append(b, dst...), src...), byte(noc.EtherType>>8), byte(noc.EtherType&0xff))
	return append(b, f.Data...)
}

// captureRead is dpuctl capture read FILE: one line per packet.
func captureRead(e *env, args []string) error {
	files, err := commandArgs(e, "capture read", args, nil)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		return usagef("capture read: want one FILE (pcapng or pcap; - for stdin)")
	}
	file := files[0]
	var in io.Reader = e.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	return readCapture(in, e.stdout)
}

// packetSource is what pcap and pcapng readers have in common.
type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

func readCapture(in io.Reader, out io.Writer) error {
	br := bufio.NewReader(in)
	magic, err := br.Peek(4)
	if err != nil {
		return fmt.Errorf("capture read: %w", err)
	}
	var src packetSource
	var ng *pcapgo.NgReader
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		ng, err = pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		src = ng
	} else {
		src, err = pcapgo.NewReader(br)
	}
	if err != nil {
		return fmt.Errorf("capture read: not a pcapng or pcap file: %w", err)
	}
	w := bufio.NewWriter(out)
	defer w.Flush()
	for n := 1; ; n++ {
		var (
			data []byte
			ci   gopacket.CaptureInfo
			dir  = "-"
		)
		if ng != nil {
			var opts pcapgo.NgPacketOptions
			data, ci, opts, err = ng.ReadPacketDataWithOptions()
			if opts.Flags != nil {
				switch opts.Flags.Direction {
				case pcapgo.NgEpbFlagDirectionInbound:
					dir = "rx"
				case pcapgo.NgEpbFlagDirectionOutbound:
					dir = "tx"
				}
			}
		} else {
			data, ci, err = src.ReadPacketData()
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("capture read: packet %d: %w", n, err)
		}
		port := "-"
		if ng != nil {
			if intf, err := ng.Interface(ci.InterfaceIndex); err == nil && intf.Name != "" {
				port = intf.Name
			}
		}
		if _, err := io.WriteString(w, describeLink(ci.Timestamp, port, dir, data, src.LinkType())); err != nil {
			return err
		}
	}
}

// describe is one captured Ethernet packet as a line.
func describe(at time.Time, port, dir string, data []byte) string {
	return describeLink(at, port, dir, data, layers.LinkTypeEthernet)
}

// describeLink decodes one packet down to the NoC frame: Ethernet with
// ethertype 0x88B5, or IPv4/IPv6 and UDP, then the link datagram and, when
// it carries a whole message, the frame.
func describeLink(at time.Time, port, dir string, data []byte, lt layers.LinkType) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s ", at.UTC().Format("15:04:05.000000"), port, dir)
	pkt := gopacket.NewPacket(data, lt, gopacket.DecodeOptions{Lazy: false, NoCopy: true})
	if udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); ok {
		fmt.Fprintf(&b, "udp %d>%d ", udp.SrcPort, udp.DstPort)
		pkt = gopacket.NewPacket(udp.Payload, layerTypeLink, gopacket.DecodeOptions{NoCopy: true})
	}
	l, ok := pkt.Layer(layerTypeLink).(*linkLayer)
	if !ok {
		if what, sealed := secure.Describe(linkBytes(pkt)); sealed {
			fmt.Fprintf(&b, "secure link: %s; sealed, so not decoded (a capture of a link with key-file shows only this)\n", what)
			return b.String()
		}
		if el := pkt.ErrorLayer(); el != nil {
			fmt.Fprintf(&b, "not a link datagram: %v\n", el.Error())
		} else {
			fmt.Fprintf(&b, "not a NoC packet (%d bytes)\n", len(data))
		}
		return b.String()
	}
	h := l.Header
	fmt.Fprintf(&b, "link seq %d ack %d credits %d", h.Seq, h.Ack, h.Credits)
	if h.NSACK > 0 {
		fmt.Fprintf(&b, " sack %d", h.NSACK)
	}
	if h.Flags&link.FlagData == 0 {
		b.WriteString(" ack-only\n")
		return b.String()
	}
	var parts []string
	if h.Flags&link.FlagFirst != 0 {
		parts = append(parts, "first")
	}
	if h.Flags&link.FlagLast != 0 {
		parts = append(parts, "last")
	}
	if h.Flags&link.FlagPacked != 0 {
		parts = append(parts, "packed")
	}
	fmt.Fprintf(&b, " data %dB", len(l.Payload))
	if len(parts) > 0 {
		fmt.Fprintf(&b, " [%s]", strings.Join(parts, ","))
	}
	if h.Flags&link.FlagPacked != 0 {
		msgs, ok := link.Unpacked(l.Payload)
		if !ok {
			b.WriteString(": bad packing\n")
			return b.String()
		}
		fmt.Fprintf(&b, ": %d frames\n", len(msgs))
		for _, m := range msgs {
			var f noc.Frame
			if err := f.Decode(m); err != nil {
				fmt.Fprintf(&b, "    bad frame: %v\n", err)
				continue
			}
			fmt.Fprintf(&b, "    %s\n", &f)
		}
		return b.String()
	}
	if f, ok := pkt.Layer(noc.LayerTypeFrame).(*noc.Frame); ok {
		fmt.Fprintf(&b, ": %s\n", f)
		return b.String()
	}
	if el := pkt.ErrorLayer(); el != nil {
		fmt.Fprintf(&b, ": bad frame: %v\n", el.Error())
		return b.String()
	}
	b.WriteString(" (fragment)\n")
	return b.String()
}

// linkBytes is what pkt's link layer would have decoded: the bytes past
// the Ethernet header or the UDP header (pkt's first layer is then the
// link's), nil when there are none.
func linkBytes(pkt gopacket.Packet) []byte {
	if el := pkt.ErrorLayer(); el != nil {
		return el.LayerContents()
	}
	if e, ok := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); ok {
		return e.Payload
	}
	return nil
}
