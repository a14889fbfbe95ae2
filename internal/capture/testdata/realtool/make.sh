#!/usr/bin/env bash
# Rewrites the captures in this directory with real tools: tcpdump records
# short sessions of tools/corpusclient against bin/relay on loopback, and
# editcap, mergecap and tshark make the variants (root or CAP_NET_RAW;
# Debian: tcpdump, tshark, wireshark-common). Run from the repository root:
#   bash internal/capture/testdata/realtool/make.sh
set -euo pipefail
out=internal/capture/testdata/realtool
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/relay" ./cmd/relay
go build -o "$tmp/cc" ./tools/corpusclient
# Free ports, so never the relay's default 7400.
"$tmp/relay" --listen 127.0.0.1:0 --udp 127.0.0.1:0 --metrics off >"$tmp/relay.out" 2>"$tmp/relay.log" &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$tmp/relay.out" && break; sleep 0.1; done
port=$(sed -n 's/.*tcp=[^ ]*:\([0-9]*\) .*/\1/p' "$tmp/relay.out")
uport=$(sed -n 's/.*udp=[^ ]*:\([0-9]*\) .*/\1/p' "$tmp/relay.out")
echo "relay on tcp $port udp $uport"

# capture IFACES FILTER FILE CMD...: tcpdump on each interface while CMD runs.
capture() {
	local filter=$1 file=$2; shift 2
	local cap=()
	for ifc in lo any; do
		[ "$ifc" = any ] && [ "${DUAL:-}" != 1 ] && continue
		tcpdump -i "$ifc" --immediate-mode -s 0 -U -w "$tmp/$ifc.pcap" "$filter" 2>/dev/null &
		cap+=($!)
	done
	sleep 1
	"$@"
	sleep 0.5
	for p in "${cap[@]}"; do kill -INT "$p"; wait "$p" || true; done
	cp "$tmp/lo.pcap" "$file"
}

# 1. A client port reused after an RST (twice), then a graceful close.
capture "tcp port $port" "$out/rst-reuse.pcap" "$tmp/cc" --target 127.0.0.1:$port --mode rst-reuse --local-port $((40000 + RANDOM % 20000))

# 2. UDP datagrams seen twice: the same session on lo and on any, merged
#    into one pcapng with mergecap (two interfaces).
DUAL=1 capture "udp port $uport" "$tmp/udp-lo.pcap" "$tmp/cc" --target 127.0.0.1:$uport --mode udp
mergecap -F pcapng -w "$out/udp-dup-merged.pcapng" "$tmp/lo.pcap" "$tmp/any.pcap"

# 3. A capture started mid-connection, the server talking first, on a
#    port that is not 7400: tshark keeps what came 0.8 s after alice's
#    join (bob joins at 1 s and alice receives his sends before she sends).
capture "tcp port $port" "$tmp/talk.pcap" "$tmp/cc" --target 127.0.0.1:$port --mode talk
first=$(tshark -r "$tmp/talk.pcap" -T fields -e frame.time_epoch -c 1)
tshark -r "$tmp/talk.pcap" -Y "frame.time_epoch >= $(echo "$first + 0.8" | bc)" -w "$out/midconn-server-first.pcap"

# 4. One packet dated 2100 and one dated 1970 in the RST capture, and one
#    packet 2 ms earlier than the one before: editcap cuts the capture
#    around a packet, shifts that packet, and mergecap -a puts the pieces
#    back in file order.
n=$(tshark -r "$out/rst-reuse.pcap" -T fields -e frame.number | wc -l)
shift_packet() { # in out packet seconds
	editcap -r "$1" "$tmp/a.pcap" "1-$(($3 - 1))"
	editcap -r "$1" "$tmp/b.pcap" "$3"
	editcap -t "$4" "$tmp/b.pcap" "$tmp/b2.pcap"
	editcap -r "$1" "$tmp/c.pcap" "$(($3 + 1))-$n"
	mergecap -a -F pcap -w "$2" "$tmp/a.pcap" "$tmp/b2.pcap" "$tmp/c.pcap"
}
now=$(tshark -r "$out/rst-reuse.pcap" -T fields -e frame.time_epoch -c 1 | cut -d. -f1)
shift_packet "$out/rst-reuse.pcap" "$tmp/y2100.pcap" 10 $((4102444800 - now))
shift_packet "$tmp/y2100.pcap" "$out/dates-2100-1970.pcap" 20 -$((now - 1000))
shift_packet "$out/rst-reuse.pcap" "$out/backwards-2ms.pcap" 17 -0.002
ls -l "$out"

# 5. Derived with editcap from the files above: a capture missing one
#    packet (packet 9, a delivery to the client: bytes missing in the
#    stream), and the UDP capture cut at a 100-byte snap length (the
#    1200-byte padded joins are cut).
editcap "$out/rst-reuse.pcap" "$out/missing-packet.pcap" 9
editcap -s 100 "$out/udp-dup-merged.pcapng" "$out/udp-snap-100.pcapng"
