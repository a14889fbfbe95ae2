package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// Hostile files: each must give a clear *FormatError naming the packet,
// quickly and without a large allocation. The corpus is also on disk in
// testdata/hostile/ (written by -update-hostile) for other tools to try.

func pcapHeader(snaplen uint32) []byte {
	h := make([]byte, 24)
	binary.LittleEndian.PutUint32(h[0:], magicMicros)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], snaplen)
	binary.LittleEndian.PutUint32(h[20:], uint32(layers.LinkTypeEthernet))
	return h
}

func pcapRecord(capLen, wireLen uint32, data []byte) []byte {
	r := make([]byte, 16, 16+len(data))
	binary.LittleEndian.PutUint32(r[8:], capLen)
	binary.LittleEndian.PutUint32(r[12:], wireLen)
	return append(r, data...)
}

func ngBlock(typ uint32, length uint32, body []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, typ)
	b = binary.LittleEndian.AppendUint32(b, length)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, length)
}

func ngSHB() []byte {
	body := binary.LittleEndian.AppendUint32(nil, ngByteOrder)
	body = binary.LittleEndian.AppendUint16(body, 1)
	body = binary.LittleEndian.AppendUint16(body, 0)
	body = binary.LittleEndian.AppendUint64(body, ^uint64(0))
	return ngBlock(ngBlockSHB, uint32(12+len(body)), body)
}

func ngIDB() []byte {
	body := binary.LittleEndian.AppendUint16(nil, uint16(layers.LinkTypeEthernet))
	body = binary.LittleEndian.AppendUint16(body, 0)
	body = binary.LittleEndian.AppendUint32(body, 0)
	return ngBlock(ngBlockIDB, uint32(12+len(body)), body)
}

func ngEPB(iface, capLen, wireLen uint32, data []byte) []byte {
	body := binary.LittleEndian.AppendUint32(nil, iface)
	body = binary.LittleEndian.AppendUint64(body, 0)
	body = binary.LittleEndian.AppendUint32(body, capLen)
	body = binary.LittleEndian.AppendUint32(body, wireLen)
	body = append(body, data...)
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	return ngBlock(ngBlockEPB, uint32(12+len(body)), body)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// hostileCases are the files; packet is the packet number the error must
// name, reason a substring of it.
var hostileCases = []struct {
	name   string
	file   []byte
	packet int
	reason string
}{
	{"pcap_caplen_over_wirelen", cat(pcapHeader(65535), pcapRecord(60, 60, make([]byte, 60)), pcapRecord(100, 60, make([]byte, 100))), 2, "over the wire length"},
	{"pcap_caplen_over_limit", cat(pcapHeader(65535), pcapRecord(0x7FFFFFFF, 0x7FFFFFFF, nil)), 1, "over the 262144-byte limit"},
	{"pcap_not_a_capture", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0, "not a pcap or pcapng"},
	{"pcap_too_short", []byte{0xd4, 0xc3}, 0, "too short"},
	{"pcapng_block_4gib_in_32_bytes", cat(ngSHB()[:8], []byte{}, ngBlock(0, 0, nil)[:0])[:0], 0, ""}, // replaced in init
	{"pcapng_packet_block_4gib", cat(ngSHB(), ngIDB(), ngBlock(ngBlockEPB, 0xFFFFFFF0, make([]byte, 20))), 1, "claims 4294967280 bytes"},
	{"pcapng_block_under_12", cat(ngSHB(), ngIDB(), ngBlock(ngBlockEPB, 8, nil)), 1, "under the minimum of 12"},
	{"pcapng_bad_interface_id", cat(ngSHB(), ngIDB(), ngEPB(7, 60, 60, make([]byte, 60))), 1, "interface id 7"},
	{"pcapng_caplen_over_block", cat(ngSHB(), ngIDB(), ngEPB(0, 1000, 1000, make([]byte, 60))), 1, "does not fit"},
	{"pcapng_caplen_over_wirelen", cat(ngSHB(), ngIDB(), ngEPB(0, 60, 50, make([]byte, 60))), 1, "over the wire length"},
	{"pcapng_bad_trailer", cat(ngSHB(), ngIDB(), func() []byte { b := ngEPB(0, 60, 60, make([]byte, 60)); b[len(b)-1] = 9; return b }()), 1, "trailing length"},
	{"pcapng_bad_byte_order", func() []byte { b := ngSHB(); b[8] = 0; return b }(), 0, "byte-order"},
}

func init() {
	// A 32-byte file: a section header whose length field claims 4 GiB.
	b := ngSHB()[:32]
	binary.LittleEndian.PutUint32(b[4:], 0xFFFFFFFC)
	hostileCases[4].file, hostileCases[4].reason = b, "claims 4294967292 bytes"
}

func TestHostileFiles(t *testing.T) {
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readWithDeadline(t, tc.file)
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T), want a *FormatError", err, err)
			}
			if fe.Packet != tc.packet || !strings.Contains(fe.Error(), tc.reason) {
				t.Fatalf("error %q (packet %d), want packet %d and %q", fe, fe.Packet, tc.packet, tc.reason)
			}
		})
	}
}

// TestHostileCorpusOnDisk reads every file in testdata/hostile/ but the
// mended cases (TestMendedCorpusOnDisk): each must fail with an error,
// never hang.
func TestHostileCorpusOnDisk(t *testing.T) {
	files, _ := filepath.Glob("testdata/hostile/*")
	mended := map[string]bool{}
	for _, tc := range mendedCases(t) {
		mended[tc.name] = true
	}
	if len(files) < len(hostileCases)+len(mended) {
		t.Fatalf("testdata/hostile has %d files, want %d", len(files), len(hostileCases)+len(mended))
	}
	for _, path := range files {
		if mended[filepath.Base(path)] {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readWithDeadline(t, data); err == nil {
			t.Errorf("%s: read without error", path)
		}
	}
}

// TestHostileAllocation checks that the 4 GiB claims do not allocate.
func TestHostileAllocation(t *testing.T) {
	for _, i := range []int{1, 4, 5} {
		data := hostileCases[i].file
		allocs := testing.AllocsPerRun(5, func() { _, _ = Read(bytes.NewReader(data), rep(Options{})) })
		if allocs > 200 {
			t.Errorf("%s: %v allocations", hostileCases[i].name, allocs)
		}
	}
}

func TestPartialCaptureOnFormatError(t *testing.T) {
	cf, _ := sessionFrames()
	b := tcpSession(t, cliAddr, srvAddr, 1000, nil)
	data, err := os.ReadFile(writeCapture(t, PCAP, layers.LinkTypeEthernet, b.pkts))
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, pcapRecord(500, 100, make([]byte, 500))...)
	c, err := Read(bytes.NewReader(data), rep(Options{}))
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Packet != len(b.pkts)+1 {
		t.Fatalf("error %v, want a FormatError at packet %d", err, len(b.pkts)+1)
	}
	equalFrames(t, "client", onlyFlow(t, c).ClientFrames, cf)
}
