#!/usr/bin/env bash
# timing-fidelity.sh: how faithfully the fleet keeps the recorded send
# schedule, measured on the wire (issue 22: no worse than before).
#
# For each rep, workload (R rooms x M members, N:N: every member replays
# the bundled capture's alice), transport (tcp: captures/vr-session.pcap,
# udp: captures/vr-session-udp.pcap) and build (BINS, interleaved A B then
# B A), it starts the relay as its own process on 127.0.0.1, captures the
# clients' packets to it with tcpdump on lo (client->server only: data,
# SYN, FIN and RST for TCP, every datagram for UDP), runs the build's
# replay against it, and has tools/fidelity compare each replayed
# client's gaps between successive frames (cut from the reassembled
# stream, not counted in packets) with the recorded gaps of the same
# frames. One row per run: clients and gaps compared, median and p99 of
# |gap error|, the share of gaps within 1 ms and 5 ms, how late each
# client's last frame was against its schedule and how late its frames of
# the last second were (median and worst over clients), the
# fleet's own schedule-lag p99 from its summary, tcpdump's drops, the
# load average and the clients the server disconnected. Then the
# medians per build, workload and transport.
#
#   scripts/timing-fidelity.sh                                  # bin, 8x32, 2x32 and 1x8, tcp and udp, 3 reps, 15 s (~8 min)
#   BINS="old=/tmp/old/bin new=bin" scripts/timing-fidelity.sh  # two builds, interleaved
#   REPS=1 WORKLOADS=1x8 TRANSPORTS=tcp KEEP=1 scripts/timing-fidelity.sh  # keep the pcaps in OUT
#
# The relay is RELAY (default bin/relay) for every build, so only the
# fleet differs; RELAY=own uses each build's own relay. Needs root (or
# CAP_NET_RAW) and tcpdump (make deps-bench-fidelity), bin/relay and
# bin/replay (make build). Loopback only; each run is bounded by
# DURATION plus the fleet's leave.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DURATION=${DURATION:-15s}
WORKLOADS=${WORKLOADS:-"8x32 2x32 1x8"}
TRANSPORTS=${TRANSPORTS:-"tcp udp"}
BINS=${BINS:-bin}
RELAY=${RELAY:-bin/relay}
LOGIN_INTERVAL=${LOGIN_INTERVAL:-1ms}
KEEP=${KEEP:-}
BOUND=${BOUND:-600} # seconds any one relay or tcpdump may run
OUT=${OUT:-$(mktemp -d /tmp/timing-fidelity.XXXXXX)}
mkdir -p "$OUT"
command -v tcpdump >/dev/null || { echo "timing-fidelity: tcpdump is not installed (make deps-bench-fidelity)" >&2; exit 2; }
FIDELITY=${FIDELITY:-$OUT/fidelity}
[[ -x $FIDELITY ]] || go build -o "$FIDELITY" ./tools/fidelity

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

run_one() { # run_one LABEL=BINDIR WORKLOAD TRANSPORT REP
	local label=${1%%=*} bin=${1#*=}
	local w=$2 t=$3 rep=$4 rooms=${2%x*} members=${2#*x}
	local capf=captures/vr-session.pcap filter
	[[ $t == udp ]] && capf=captures/vr-session-udp.pcap
	local tag=$label-$w-$t-$rep relay=$RELAY
	[[ $relay == own ]] && relay=$bin/relay
	local log=$OUT/relay-$tag.log pcap=$OUT/replay-$tag.pcap sum=$OUT/summary-$tag.json
	# Each process is bounded in time even if this script is killed.
	timeout "$BOUND" "$relay" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --log-level warn >"$log" 2>&1 &
	local rpid=$!
	PIDS+=("$rpid")
	local line=""
	for _ in $(seq 50); do
		line=$(grep -m1 '^listening' "$log" 2>/dev/null || true)
		[[ -n $line ]] && break
		sleep 0.1
	done
	[[ -n $line ]] || { echo "relay did not start: $(cat "$log")" >&2; return 1; }
	local addr port
	addr=$(sed -E 's/.*tcp=([^ ]+).*/\1/' <<<"$line")
	port=${addr##*:}
	if [[ $t == udp ]]; then
		filter="udp and dst host 127.0.0.1 and dst port $port"
	else
		# Client->server segments that carry data or open/close: not the
		# ACKs of the deliveries, which would be most of the packets.
		filter="tcp and dst host 127.0.0.1 and dst port $port and (tcp[tcpflags] & (tcp-syn|tcp-fin|tcp-rst) != 0 or (ip[2:2] - ((ip[0]&0xf)<<2) - ((tcp[12]&0xf0)>>2)) != 0)"
	fi
	timeout "$BOUND" tcpdump -i lo -n -s 0 -B 131072 --time-stamp-precision=nano -w "$pcap" "$filter" >/dev/null 2>"$OUT/tcpdump-$tag.log" &
	local tpid=$!
	PIDS+=("$tpid")
	for _ in $(seq 50); do
		grep -q 'listening on' "$OUT/tcpdump-$tag.log" 2>/dev/null && break
		sleep 0.1
	done
	grep -q 'listening on' "$OUT/tcpdump-$tag.log" || { echo "tcpdump did not start: $(cat "$OUT/tcpdump-$tag.log")" >&2; return 1; }
	timeout "$BOUND" "$bin"/replay --capture "$capf" --target "$addr" --clients $((rooms * members)) --room-size "$members" \
		--login-interval "$LOGIN_INTERVAL" --duration "$DURATION" --metrics "" --progress-interval 1h --log-level warn \
		--summary "$sum" >"$OUT/replay-$tag.log" 2>&1 || true
	local load
	load=$(cut -d' ' -f1 /proc/loadavg)
	# tcpdump gets packets from the kernel in blocks handed over when full
	# or after libpcap's 1 s timeout, and drops the block still filling
	# when interrupted: wait past the timeout, or the last second is lost.
	sleep 2
	kill -INT "$tpid"
	wait "$tpid" 2>/dev/null || true
	kill "$rpid"
	wait "$rpid" 2>/dev/null || true
	local drops row
	drops=$(awk '/packets dropped by kernel/ {print $1}' "$OUT/tcpdump-$tag.log")
	row=$("$FIDELITY" --recording "$capf" --server-port "$port" --header=false --label "$label	$w	$t	$rep" "$pcap")
	[[ -n $KEEP ]] || rm -f "$pcap"
	python3 - "$sum" "$row" "${drops:-?}" "$load" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
lag = (s.get("schedule_lag_ms") or {}).get("p99", float("nan"))
row = sys.argv[2].split("\t")
# The frames on the wire against the fleet's own count: below 100 % the
# capture missed frames (or the fleet counted frames it did not send).
sent = sum(s.get("frames_sent", {}).values())
wire = 100 * int(row[4]) / sent if sent else float("nan")
# Clients the server cut (a slow consumer on a loaded host) send fewer
# frames and no leave: such a run compares less.
disc = sum((s.get("disconnects") or {}).values())
print(f"{sys.argv[2]}\t{s['logins_succeeded']}/{s['clients_requested']}\t{wire:.1f}\t{lag:.2f}\t{sys.argv[3]}\t{sys.argv[4]}\t{disc}")
EOF
}

echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) reps=$REPS duration=$DURATION bins='$BINS' relay=$RELAY out=$OUT"
HEAD="bin	workload	transport	rep	frames	clients	gaps	err_p50_ms	err_p99_ms	within_1ms_%	within_5ms_%	drift_p50_ms	drift_max_ms	end_late_p50_ms	end_late_max_ms	unmatched	size_diff	idle	broken	logins	wire/sent_%	lag_p99_ms	tcpdump_drops	load1	disconnects"
echo "$HEAD"
RES=$OUT/results.tsv
: >"$RES"
read -r -a bins <<<"$BINS"
for rep in $(seq "$REPS"); do
	order=("${bins[@]}")
	if ((rep % 2 == 0)); then # A B, then B A: neither build always runs first
		order=()
		for ((i = ${#bins[@]} - 1; i >= 0; i--)); do order+=("${bins[i]}"); done
	fi
	for w in $WORKLOADS; do
		for t in $TRANSPORTS; do
			for b in "${order[@]}"; do
				[[ $b == *=* ]] || b=$(basename "$b")=$b
				run_one "$b" "$w" "$t" "$rep" >"$OUT/row" # not in a pipe: the trap sees its processes
				tee -a "$RES" <"$OUT/row"
			done
		done
	done
done
echo "# medians (load now: $(cut -d' ' -f1-3 /proc/loadavg))"
python3 - "$RES" <<'EOF'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows[(f[1], f[2], f[0])].append(f)
col = {n: i for i, n in enumerate("bin workload transport rep frames clients gaps err_p50_ms err_p99_ms within_1ms_% within_5ms_% drift_p50_ms drift_max_ms end_late_p50_ms end_late_max_ms unmatched size_diff idle broken logins wire/sent_% lag_p99_ms tcpdump_drops load1 disconnects".split())}
show = "gaps err_p50_ms err_p99_ms within_1ms_% within_5ms_% drift_p50_ms drift_max_ms end_late_p50_ms end_late_max_ms wire/sent_% lag_p99_ms load1 disconnects".split()
print("workload\ttransport\tbin\truns\t" + "\t".join(show))
for (w, t, b), fs in sorted(rows.items()):
    m = lambda n: st.median(float(x[col[n]]) for x in fs)
    print(f"{w}\t{t}\t{b}\t{len(fs)}\t" + "\t".join(f"{m(n):.3f}" if "ms" in n else f"{m(n):.1f}" for n in show))
EOF
