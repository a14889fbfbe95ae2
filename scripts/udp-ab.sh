#!/usr/bin/env bash
# udp-ab.sh: the relay over UDP beside the relay over TCP, A/B in one run.
#
# For each rep and workload (R rooms × M members, every member replaying
# the bundled capture's alice: N:N), it starts bin/relay as its own process
# on 127.0.0.1, runs bin/replay over TCP (captures/vr-session.pcap) and then
# over UDP (captures/vr-session-udp.pcap), interleaved, and prints one line
# per run: logins, delivery latency, loss, relay CPU per million
# deliveries (utime+stime of the relay over the whole replay run, divided
# by relay_delivered_messages_total) and the relay's UDP receive drops.
# Then the medians per workload and transport, and UDP/TCP ratios.
#
#   scripts/udp-ab.sh                      # 4x32 and 8x32, 3 reps, 20 s
#   REPS=1 DURATION=10s WORKLOADS="4x32" scripts/udp-ab.sh
#   RELAY_ARGS="..." BIN=/tmp/old-bin scripts/udp-ab.sh  # extra relay flags, other binaries
#
# Needs bin/relay and bin/replay (make build). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DURATION=${DURATION:-20s}
WORKLOADS=${WORKLOADS:-"4x32 8x32"}
TRANSPORTS=${TRANSPORTS:-"tcp udp"}
BIN=${BIN:-bin}
RELAY_ARGS=${RELAY_ARGS:-}
LOGIN_INTERVAL=${LOGIN_INTERVAL:-100us}
OUT=${OUT:-$(mktemp -d /tmp/udp-ab.XXXXXX)}
mkdir -p "$OUT"
TCK=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
metric() { # metric URL NAME: the value of an unlabelled sample, 0 if absent
	curl -fsS "$1" | awk -v n="$2" '$1==n {print $2; f=1} END {if (!f) print 0}'
}

run_one() { # run_one WORKLOAD TRANSPORT REP
	local w=$1 t=$2 rep=$3 rooms=${1%x*} members=${1#*x}
	local capf=captures/vr-session.pcap
	[[ $t == udp ]] && capf=captures/vr-session-udp.pcap
	local log=$OUT/relay-$w-$t-$rep.log sum=$OUT/summary-$w-$t-$rep.json
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
		>"$OUT/replay-$w-$t-$rep.log" 2>&1 || true
	c1=$(cpu_ticks "$pid")
	d=$(metric "$mURL" relay_delivered_messages_total)
	local drops
	drops=$(metric "$mURL" relay_udp_receive_drops_total)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	python3 - "$sum" "$w" "$t" "$rep" "$c0" "$c1" "$TCK" "$d" "$drops" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
w, t, rep = sys.argv[2:5]
c0, c1, tck, d, drops = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8]), float(sys.argv[9])
cpu = (c1 - c0) / tck
per_m = cpu / d * 1e6 if d else float("nan")
lat = s["latency_ms"] or {"p50": float("nan"), "p99": float("nan")}  # null: no stamped delivery
loss = s.get("loss_percent", float("nan"))
fails = sum(s["logins_failed"].values())
print(f"{w}\t{t}\t{rep}\t{s['logins_succeeded']}/{s['clients_requested']}\t{fails}\t"
      f"{lat['p50']:.2f}\t{lat['p99']:.2f}\t{loss:.3f}\t{int(d)}\t{cpu:.2f}\t{per_m:.2f}\t{int(drops)}\t{s['messages_received']}")
EOF
}

echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) reps=$REPS duration=$DURATION relay_args='$RELAY_ARGS' login_interval=$LOGIN_INTERVAL out=$OUT"
printf 'workload\ttransport\trep\tlogins\tfailed\tp50ms\tp99ms\tloss%%\tdeliveries\trelay_cpu_s\tcpu_s_per_M\tudp_drops\treceived\n'
RES=$OUT/results.tsv
: >"$RES"
for rep in $(seq "$REPS"); do
	for w in $WORKLOADS; do
		for t in $TRANSPORTS; do
			run_one "$w" "$t" "$rep" | tee -a "$RES"
		done
	done
done
echo "# medians (load now: $(cut -d' ' -f1-3 /proc/loadavg))"
python3 - "$RES" <<'EOF'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows[(f[0], f[1])].append(f)
med = {}
print("workload\ttransport\tlogins(min)\tp50ms\tp99ms\tloss%\tcpu_s_per_M\tudp_drops")
for (w, t), fs in sorted(rows.items()):
    m = lambda i: st.median(float(x[i]) for x in fs)
    med[(w, t)] = (m(6), m(10))
    logins = min((x[3] for x in fs), key=lambda s: int(s.split("/")[0]))
    print(f"{w}\t{t}\t{logins}\t{m(5):.2f}\t{m(6):.2f}\t{m(7):.3f}\t{m(10):.2f}\t{m(11):.0f}")
for (w, t), (p99, cpu) in sorted(med.items()):
    if t == "udp" and (w, "tcp") in med and med[(w, "tcp")][0] and med[(w, "tcp")][1]:
        tp99, tcpu = med[(w, "tcp")]
        print(f"{w}\tudp/tcp\tcpu {cpu / tcpu:.2f}x\tp99 {p99 / tp99:.2f}x")
EOF
