package capture

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// tlsStreams returns the two byte streams of a capture's one TCP
// connection (the proxy's captures: in order, no retransmissions), the
// first sender's first.
func tlsStreams(tb testing.TB, path string) (client, server []byte) {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var src gopacket.PacketDataSource
	if strings.HasSuffix(path, ".pcapng") {
		r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			tb.Fatal(err)
		}
		src = r
	} else {
		r, err := pcapgo.NewReader(f)
		if err != nil {
			tb.Fatal(err)
		}
		src = r
	}
	var first layers.TCPPort
	for {
		data, _, err := src.ReadPacketData()
		if err != nil {
			break
		}
		p := gopacket.NewPacket(data, layers.LinkTypeEthernet, gopacket.Default)
		tcp, ok := p.TransportLayer().(*layers.TCP)
		if !ok {
			continue
		}
		if first == 0 {
			first = tcp.SrcPort
		}
		if tcp.SrcPort == first {
			client = append(client, tcp.Payload...)
		} else {
			server = append(server, tcp.Payload...)
		}
	}
	return client, server
}

// tlsTestKeys are the key logs of testdata/tls, merged.
func tlsTestKeys(tb testing.TB) *KeyLog {
	tb.Helper()
	keys := &KeyLog{secrets: map[[32]byte]*tlsSecrets{}}
	paths, _ := filepath.Glob("testdata/tls/*.keys")
	for _, p := range paths {
		k, err := ReadKeyLog(p)
		if err != nil {
			tb.Fatal(err)
		}
		keys.Merge(k)
	}
	if keys.Len() == 0 {
		tb.Fatal("no key logs in testdata/tls")
	}
	return keys
}

// readTLS runs a connection's two streams through a tlsConn in chunks of
// chunk bytes, turn about, and returns it with the plaintext each way.
func readTLS(keys *KeyLog, client, server []byte, chunk int) (*tlsConn, [2][]byte, []string) {
	var plain [2][]byte
	var notes []string
	c := newTLSConn(0, keys, [2]string{"client", "server"},
		func(i int, b []byte, _ time.Time, _ int) { plain[i] = append(plain[i], b...) },
		func(s string) { notes = append(notes, s) })
	streams := [2][]byte{client, server}
	for pkt := 1; len(streams[0])+len(streams[1]) > 0; pkt++ {
		for i := range streams {
			n := min(chunk, len(streams[i]))
			if n > 0 {
				c.feed(i, streams[i][:n], time.Unix(0, 0), pkt)
				streams[i] = streams[i][n:]
			}
		}
	}
	c.end()
	return c, plain, notes
}

// withRecord is a stream with one record appended.
func withRecord(stream []byte, typ byte, body []byte) []byte {
	out := append(bytes.Clone(stream), typ, 3, 3, 0, 0)
	binary.BigEndian.PutUint16(out[len(out)-2:], uint16(len(body)))
	return append(out, body...)
}

// renegotiation appends to a TLS 1.2 server stream a HelloRequest sealed
// with the connection's own keys: what a server asking to renegotiate
// sends.
func renegotiation(tb testing.TB, keys *KeyLog, client, server []byte) []byte {
	tb.Helper()
	ch, err := parseClientHello(client[9 : 9+int(binary.BigEndian.Uint16(client[3:5]))-4])
	if err != nil {
		tb.Fatal(err)
	}
	sh, err := parseServerHello(server[9 : 9+int(binary.BigEndian.Uint16(server[3:5]))-4])
	if err != nil {
		tb.Fatal(err)
	}
	_, sk, err := keys12(suites[sh.suite], keys.lookup(ch.random).master, ch.random, sh.random)
	if err != nil {
		tb.Fatal(err)
	}
	// The sequence number: the server's records after its ChangeCipherSpec.
	var seq uint64
	ccs := false
	for b := server; len(b) >= recordHeader; b = b[recordHeader+int(binary.BigEndian.Uint16(b[3:5])):] {
		if ccs {
			seq++
		}
		ccs = ccs || b[0] == recordCCS
	}
	var nonce [12]byte
	copy(nonce[:4], sk.iv)
	binary.BigEndian.PutUint64(nonce[4:], seq)
	hello := []byte{hsHelloRequest, 0, 0, 0}
	sealed := sk.aead.Seal(nonce[4:12:12], nonce[:], hello, aad12(seq, []byte{recordHandshake, 3, 3}, len(hello)))
	return withRecord(server, recordHandshake, sealed)
}

func TestTLSRecordReader(t *testing.T) {
	keys := tlsTestKeys(t)
	client12, server12 := tlsStreams(t, "testdata/tls/go-tls12.pcap")
	client13, server13 := tlsStreams(t, "testdata/tls/go-tls13.pcapng")
	sent, got := sessionFrames()
	cut := len(client13) - 10
	bad := bytes.Clone(server13)
	bad[len(bad)-30] ^= 1
	for _, tc := range []struct {
		name           string
		client, server []byte
		problem, note  string
		clientBytes    int
	}{
		{"tls12 whole", client12, server12, "", "", len(bytes.Join(sent, nil))},
		{"tls13 whole", client13, server13, "", "", len(bytes.Join(sent, nil))},
		{"tls13 cut inside a record", client13[:cut], server13, "", "stream ends inside a record", -1},
		{"tls13 a flipped bit", client13, bad, "does not decrypt", "", -1},
		{"tls12 renegotiation", client12, renegotiation(t, keys, client12, server12), "renegotiation (a HelloRequest after the handshake): not supported", "", -1},
		{"alert before the ServerHello", client13, withRecord(nil, recordAlert, []byte{2, 40}), "no ServerHello", "TLS alert: fatal handshake_failure", 0},
		{"not TLS after the hello", client13[:len(client13)/4], []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), "is not a TLS record", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunk := range []int{1, 7, 1500, 1 << 20} {
				c, plain, notes := readTLS(keys, tc.client, tc.server, chunk)
				info := c.result()
				if tc.problem == "" && info.Problem != "" || !strings.Contains(info.Problem, tc.problem) {
					t.Fatalf("chunk %d: problem %q, want %q; notes %q", chunk, info.Problem, tc.problem, notes)
				}
				if tc.note != "" && !strings.Contains(strings.Join(notes, "\n"), tc.note) {
					t.Fatalf("chunk %d: notes %q, want %q", chunk, notes, tc.note)
				}
				if tc.clientBytes >= 0 && len(plain[0]) != tc.clientBytes {
					t.Fatalf("chunk %d: %d client bytes, want %d", chunk, len(plain[0]), tc.clientBytes)
				}
				if tc.problem == "" && tc.note == "" && !bytes.Equal(plain[1], bytes.Join(got, nil)) {
					t.Fatalf("chunk %d: server plaintext differs", chunk)
				}
			}
		})
	}
}

// FuzzTLSRecords feeds the TLS record reader two streams (the first two
// bytes say where the client's ends) in chunks, with the secrets of
// testdata/tls: whatever the bytes, it must not panic, hold more than a
// few records, or hand on more than it was given.
func FuzzTLSRecords(f *testing.F) {
	keys := tlsTestKeys(f)
	seed := func(client, server []byte, chunk byte) {
		b := binary.BigEndian.AppendUint16(nil, uint16(len(client)))
		b = append(append(append(b, chunk), client...), server...)
		f.Add(b)
	}
	paths, _ := filepath.Glob("testdata/tls/*.pcap*")
	for _, p := range paths {
		client, server := tlsStreams(f, p)
		seed(client, server, 200)
		seed(client[:len(client)/2], server, 3)
		seed(client, server[:len(server)-7], 255)
		wrong := bytes.Clone(client)
		wrong[20] ^= 0xFF // the client random: no secret for it
		seed(wrong, server, 50)
		seed(client, withRecord(server[:len(server)/3], recordAlert, []byte{2, 20}), 90)
		if strings.Contains(p, "tls12") {
			seed(client, renegotiation(f, keys, client, server), 128)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		n := min(int(binary.BigEndian.Uint16(data)), len(data)-3)
		chunk := int(data[2]) + 1
		client, server := data[3:3+n], data[3+n:]
		c, plain, _ := readTLS(keys, client, server, chunk)
		if len(plain[0]) > len(client) || len(plain[1]) > len(server) {
			t.Fatalf("handed on %d and %d bytes from %d and %d", len(plain[0]), len(plain[1]), len(client), len(server))
		}
		for i := range c.half {
			if len(c.half[i].buf) > 4*maxRecord+chunk+recordHeader || len(c.half[i].hs) > maxHandshake+maxRecord {
				t.Fatalf("half %d holds %d record bytes and %d handshake bytes", i, len(c.half[i].buf), len(c.half[i].hs))
			}
		}
		_ = c.result().String()
	})
}
