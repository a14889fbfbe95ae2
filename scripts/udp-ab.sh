#!/usr/bin/env bash
# udp-ab.sh: the relay over UDP beside the relay over TCP, A/B in one run.
#
# For each rep and workload (R rooms × M members, every member replaying
# the bundled capture's alice: N:N), it starts bin/relay as its own process
# on 127.0.0.1, runs bin/replay over TCP (captures/vr-session.pcap) and then
# over UDP (captures/vr-session-udp.pcap), interleaved, and prints one line
# per run: logins, delivery latency, loss, relay CPU per million
# deliveries (utime+stime of the relay over the whole replay run, divided
# by relay_delivered_messages_total), the relay's UDP receive drops, the
# load average, and deliveries and bytes per TCP write or per UDP datagram.
# Then the medians per workload and transport, and UDP/TCP ratios.
#
# BINS compares builds: each rep runs every workload and transport with
# each build in turn (A B A B ...), and the medians and ratios are per
# build. LOAD=n starts n busy loops beside the runs (a stress-like load:
# on a 2-CPU host LOAD=3 holds the load average near 3 plus whatever else
# runs), stopped when the script ends; every row ends with the load
# average at the end of its run.
#
#   scripts/udp-ab.sh                      # 4x32 and 8x32, 3 reps, 20 s
#   REPS=1 DURATION=10s WORKLOADS="4x32" scripts/udp-ab.sh
#   RELAY_ARGS="..." BIN=/tmp/old-bin scripts/udp-ab.sh  # extra relay flags, other binaries
#   BINS="old=/tmp/old-bin new=bin" LOAD=3 scripts/udp-ab.sh  # two builds, interleaved, under load
#
# Needs bin/relay and bin/replay (make build). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DURATION=${DURATION:-20s}
WORKLOADS=${WORKLOADS:-"4x32 8x32"}
TRANSPORTS=${TRANSPORTS:-"tcp udp"}
BIN=${BIN:-bin}
BINS=${BINS:-"$BIN"}
LOAD=${LOAD:-0}
RELAY_ARGS=${RELAY_ARGS:-}
LOGIN_INTERVAL=${LOGIN_INTERVAL:-100us}
OUT=${OUT:-$(mktemp -d /tmp/udp-ab.XXXXXX)}
mkdir -p "$OUT"
TCK=$(getconf CLK_TCK)

# The background load: LOAD busy loops, each bounded by LOAD_LIMIT
# seconds in case the trap does not run.
LOAD_LIMIT=${LOAD_LIMIT:-7200}
HOGS=()
stop_load() { for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_load EXIT
for _ in $(seq "$LOAD"); do
	timeout "$LOAD_LIMIT" bash -c 'while :; do :; done' &
	HOGS+=($!)
done
if ((LOAD > 0)); then sleep "${LOAD_WARMUP:-30}"; fi # let the load average rise

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
metric() { # metric URL NAME: the value of an unlabelled sample, 0 if absent
	curl -fsS "$1" | awk -v n="$2" '$1==n {print $2; f=1} END {if (!f) print 0}'
}

run_one() { # run_one LABEL=BINDIR WORKLOAD TRANSPORT REP
	local label=${1%%=*} BIN=${1#*=}
	shift
	local w=$1 t=$2 rep=$3 rooms=${1%x*} members=${1#*x}
	local capf=captures/vr-session.pcap
	[[ $t == udp ]] && capf=captures/vr-session-udp.pcap
	local log=$OUT/relay-$label-$w-$t-$rep.log sum=$OUT/summary-$label-$w-$t-$rep.json
	# shellcheck disable=SC2086
	"$BIN"/relay --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --log-level warn $RELAY_ARGS >"$log" 2>&1 &
	local pid=$!
	local line=""
	for _ in $(seq 50); do
		line=$(grep -m1 '^listening' "$log" || true)
		[[ -n $line ]] && break
		sleep 0.1
	done
	[[ -n $line ]] || { echo "relay did not start: $(cat "$log")" >&2; kill "$pid"; return 1; }
	local addr mURL
	addr=$(sed -E 's/.*tcp=([^ ]+).*/\1/' <<<"$line")
	mURL=http://$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")/metrics
	local c0 c1 d
	c0=$(cpu_ticks "$pid")
	"$BIN"/replay --capture "$capf" --target "$addr" --clients $((rooms * members)) --room-size "$members" \
		--login-interval "$LOGIN_INTERVAL" --duration "$DURATION" --metrics "" --progress-interval 1h --log-level warn --summary "$sum" \
		>"$OUT/replay-$label-$w-$t-$rep.log" 2>&1 || true
	c1=$(cpu_ticks "$pid")
	d=$(metric "$mURL" relay_delivered_messages_total)
	local drops
	drops=$(metric "$mURL" relay_udp_receive_drops_total)
	local sends=relay_writes_total # what one delivery shares: a TCP write, a UDP datagram
	[[ $t == udp ]] && sends=relay_udp_sent_datagrams_total
	sends=$(metric "$mURL" $sends)
	local bytes
	bytes=$(metric "$mURL" relay_sent_bytes_total)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	python3 - "$sum" "$w" "$t" "$rep" "$c0" "$c1" "$TCK" "$d" "$drops" "$label" "$(cut -d' ' -f1 /proc/loadavg)" "$sends" "$bytes" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
w, t, rep = sys.argv[2:5]
c0, c1, tck, d, drops = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8]), float(sys.argv[9])
label, load, sends = sys.argv[10], sys.argv[11], float(sys.argv[12])
per_send = d / sends if sends else float("nan")
bytes_per_send = float(sys.argv[13]) / sends if sends else float("nan")
cpu = (c1 - c0) / tck
per_m = cpu / d * 1e6 if d else float("nan")
lat = s["latency_ms"] or {"p50": float("nan"), "p99": float("nan")}  # null: no stamped delivery
loss = s.get("loss_percent", float("nan"))
fails = sum(s["logins_failed"].values())
print(f"{label}\t{w}\t{t}\t{rep}\t{s['logins_succeeded']}/{s['clients_requested']}\t{fails}\t"
      f"{lat['p50']:.2f}\t{lat['p99']:.2f}\t{loss:.3f}\t{int(d)}\t{cpu:.2f}\t{per_m:.2f}\t{int(drops)}\t{s['messages_received']}\t{load}\t{per_send:.1f}\t{bytes_per_send:.0f}")
EOF
}

echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) (LOAD=$LOAD busy loops) reps=$REPS duration=$DURATION bins='$BINS' relay_args='$RELAY_ARGS' login_interval=$LOGIN_INTERVAL out=$OUT"
printf 'bin\tworkload\ttransport\trep\tlogins\tfailed\tp50ms\tp99ms\tloss%%\tdeliveries\trelay_cpu_s\tcpu_s_per_M\tudp_drops\treceived\tload1\tdlv_per_send\tbytes_per_send\n'
RES=$OUT/results.tsv
: >"$RES"
for rep in $(seq "$REPS"); do
	for w in $WORKLOADS; do
		for b in $BINS; do
			[[ $b == *=* ]] || b=$(basename "$b")=$b
			for t in $TRANSPORTS; do
				run_one "$b" "$w" "$t" "$rep" | tee -a "$RES"
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
    rows[(f[0], f[1], f[2])].append(f)
med = {}
print("bin\tworkload\ttransport\tlogins(min)\tfailed(max)\tp50ms\tp99ms\tloss%\tcpu_s_per_M\tudp_drops\tload1\tdlv_per_send\tbytes_per_send")
for (b, w, t), fs in sorted(rows.items()):
    m = lambda i: st.median(float(x[i]) for x in fs)
    med[(b, w, t)] = (m(7), m(11))
    logins = min((x[4] for x in fs), key=lambda s: int(s.split("/")[0]))
    failed = max(int(x[5]) for x in fs)
    print(f"{b}\t{w}\t{t}\t{logins}\t{failed}\t{m(6):.2f}\t{m(7):.2f}\t{m(8):.3f}\t{m(11):.2f}\t{m(12):.0f}\t{m(14):.1f}\t{m(15):.1f}\t{m(16):.0f}")
for (b, w, t), (p99, cpu) in sorted(med.items()):
    if t == "udp" and (b, w, "tcp") in med and med[(b, w, "tcp")][0] and med[(b, w, "tcp")][1]:
        tp99, tcpu = med[(b, w, "tcp")]
        print(f"{b}\t{w}\tudp/tcp\tcpu {cpu / tcpu:.2f}x\tp99 {p99 / tp99:.2f}x")
EOF
