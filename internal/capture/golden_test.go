package capture

import (
	"bytes"
	"flag"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// synthSession writes a fixed proxied session: a TCP connection from
// handshake to FINs and a UDP exchange, at fixed times.
func synthSession(t *testing.T, format Format) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, format, layers.LinkTypeEthernet, DefaultSnaplen)
	if err != nil {
		t.Fatal(err)
	}
	cf, sf := sessionFrames()
	client, server := netip.MustParseAddrPort("127.0.0.1:50000"), netip.MustParseAddrPort("127.0.0.1:7400")
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	c, err := w.OpenTCP(at(0), client, server)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range cf {
		must(t, c.Data(at(10+10*i), true, f))
		if i < len(sf) {
			must(t, c.Data(at(15+10*i), false, sf[i]))
		}
	}
	must(t, c.Close(at(500), true))
	must(t, c.Close(at(501), false))
	must(t, c.Close(at(502), false)) // repeats are no-ops
	v6c, v6s := netip.MustParseAddrPort("[::1]:50001"), netip.MustParseAddrPort("[::1]:7400")
	must(t, w.UDP(at(600), v6c, v6s, append(wire.AppendDatagram(nil, 0), cf[0]...)))
	must(t, w.UDP(at(601), v6s, v6c, sf[0]))
	must(t, w.Close())
	return buf.Bytes()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriterGolden(t *testing.T) {
	cf, sf := sessionFrames()
	for _, tc := range []struct {
		format Format
		path   string
	}{{PCAP, "testdata/synth.pcap"}, {PCAPNG, "testdata/synth.pcapng"}} {
		data := synthSession(t, tc.format)
		testproc.Golden(t, tc.path, data, *update, "-update")
		c, err := Read(bytes.NewReader(data), rep(Options{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Flows) != 2 || len(c.Warnings) > 0 {
			t.Fatalf("%d flows, warnings %q", len(c.Flows), c.Warnings)
		}
		tcp, udp := c.Flows[0], c.Flows[1]
		equalFrames(t, "tcp client", tcp.ClientFrames, cf)
		equalFrames(t, "tcp server", tcp.ServerFrames, sf)
		equalFrames(t, "udp client", udp.ClientFrames, cf[:1])
		if tcp.Packets != 3+len(cf)+len(sf)+4 || tcp.Duration() != 501*time.Millisecond {
			t.Fatalf("tcp flow: %d packets over %v", tcp.Packets, tcp.Duration())
		}
		checkTshark(t, tc.path, c.Packets)
	}
}

func TestInspectGolden(t *testing.T) {
	c, err := Read(bytes.NewReader(synthSession(t, PCAP)), rep(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	c.Path = "synth.pcap"
	var text, js bytes.Buffer
	must(t, inspect(c).WriteText(&text))
	must(t, inspect(c).WriteJSON(&js))
	testproc.Golden(t, "testdata/inspect.txt.golden", text.Bytes(), *update, "-update")
	testproc.Golden(t, "testdata/inspect.json.golden", js.Bytes(), *update, "-update")
}

func TestUnsupportedLinkType(t *testing.T) {
	b := tcpSession(t, cliAddr, srvAddr, 1, nil)
	data := writeRawPcap(t, layers.LinkTypeRaw, b.pkts)
	data[20] = byte(layers.LinkTypeIEEE802_11) // relabel the file's link type
	c, err := Read(bytes.NewReader(data), rep(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Flows) != 0 || !strings.Contains(strings.Join(c.Warnings, "\n"), "unsupported link type") {
		t.Fatalf("flows %d, warnings %q", len(c.Flows), c.Warnings)
	}
}
