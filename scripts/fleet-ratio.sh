#!/usr/bin/env bash
# fleet-ratio.sh: the fleet's CPU per received message against the relay's
# CPU per delivered message, in the same run (issue 22: at most 0.5x).
#
# For each rep, workload (R rooms x M members, N:N: every member replays
# the bundled capture's alice over TCP) and replay binary (A, and B when
# given, interleaved A B / B A), it starts bin/relay as its own process on
# 127.0.0.1, runs the replay against it and prints one line: logins,
# latency, loss, the relay's CPU (utime+stime from /proc/PID/stat over the
# whole replay run) per million deliveries (relay_delivered_messages_total),
# the fleet's CPU (fleet_process_cpu_seconds of its summary: the replay
# process's own, over the same run) per million received messages, their
# ratio, and the fleet's peak RSS. Then the medians per workload and
# binary, and B/A.
#
#   scripts/fleet-ratio.sh                                # 8x32 and 16x32, 3 reps, 15 s, bin/replay
#   B=/tmp/new/replay REPS=5 scripts/fleet-ratio.sh       # A/B: bin/replay against another build
#   PROFILE=/tmp/prof REPS=1 scripts/fleet-ratio.sh       # also a CPU profile per run (go tool pprof)
#
# Needs bin/relay and bin/replay (make build). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DURATION=${DURATION:-15s}
WORKLOADS=${WORKLOADS:-"8x32 16x32"}
RELAY=${RELAY:-bin/relay}
A=${A:-bin/replay}
B=${B:-}
PROFILE=${PROFILE:-}
CAPTURE=${CAPTURE:-captures/vr-session.pcap}
EXTRA=${EXTRA:-}
OUT=${OUT:-$(mktemp -d /tmp/fleet-ratio.XXXXXX)}
mkdir -p "$OUT"
[[ -z $PROFILE ]] || mkdir -p "$PROFILE"
TCK=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
metric() { # metric URL NAME: the value of an unlabelled sample, 0 if absent
	curl -fsS "$1" | awk -v n="$2" '$1==n {print $2; f=1} END {if (!f) print 0}'
}

run_one() { # run_one WORKLOAD TAG BINARY REP
	local w=$1 tag=$2 bin=$3 rep=$4 rooms=${1%x*} members=${1#*x}
	local log=$OUT/relay-$w-$tag-$rep.log sum=$OUT/summary-$w-$tag-$rep.json
	"$RELAY" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --udp off --log-level warn >"$log" 2>&1 &
	local pid=$!
	local line=""
	for _ in $(seq 50); do
		line=$(grep -m1 '^listening' "$log" || true)
		[[ -n $line ]] && break
		sleep 0.1
	done
	[[ -n $line ]] || { echo "relay did not start: $(cat "$log")" >&2; kill "$pid"; return 1; }
	local addr mURL prof=()
	addr=$(sed -E 's/.*tcp=([^ ]+).*/\1/' <<<"$line")
	mURL=http://$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")/metrics
	[[ -z $PROFILE ]] || prof=(--cpuprofile "$PROFILE/fleet-$w-$tag-$rep.pprof")
	local c0 c1 d
	c0=$(cpu_ticks "$pid")
	# shellcheck disable=SC2086
	"$bin" --capture "$CAPTURE" --target "$addr" --clients $((rooms * members)) --room-size "$members" \
		--login-interval 100us --duration "$DURATION" --metrics "" --progress-interval 1h --log-level warn \
		--summary "$sum" "${prof[@]}" $EXTRA >"$OUT/replay-$w-$tag-$rep.log" 2>&1 || true
	c1=$(cpu_ticks "$pid")
	d=$(metric "$mURL" relay_delivered_messages_total)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	python3 - "$sum" "$w" "$tag" "$rep" "$c0" "$c1" "$TCK" "$d" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
w, tag, rep = sys.argv[2:5]
c0, c1, tck, d = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8])
relay = (c1 - c0) / tck / d * 1e6 if d else float("nan")
recv = s["messages_received"]
fcpu = s.get("fleet_process_cpu_seconds", -1)
fleet = fcpu / recv * 1e6 if recv and fcpu >= 0 else float("nan")
lat = s["latency_ms"] or {"p50": float("nan"), "p99": float("nan")}  # null: no stamped delivery
print(f"{w}\t{tag}\t{rep}\t{s['logins_succeeded']}/{s['clients_requested']}\t{lat['p50']:.2f}\t{lat['p99']:.2f}\t"
      f"{s.get('loss_percent', 0):.3f}\t{int(d)}\t{recv}\t{relay:.3f}\t{fleet:.3f}\t{fleet / relay:.3f}\t"
      f"{s.get('fleet_process_peak_rss_bytes', 0) / 2**20:.1f}")
EOF
}

echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) reps=$REPS duration=$DURATION A=$A B=${B:--} out=$OUT"
printf 'workload\tbinary\trep\tlogins\tp50ms\tp99ms\tloss%%\tdelivered\treceived\trelay_s_per_M\tfleet_s_per_M\tfleet/relay\tfleet_rss_MiB\n'
RES=$OUT/results.tsv
: >"$RES"
for rep in $(seq "$REPS"); do
	order=("A $A")
	if [[ -n $B ]]; then
		if ((rep % 2)); then order=("A $A" "B $B"); else order=("B $B" "A $A"); fi
	fi
	for w in $WORKLOADS; do
		for o in "${order[@]}"; do
			run_one "$w" "${o%% *}" "${o#* }" "$rep" | tee -a "$RES"
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
print("workload\tbinary\truns\tp99ms\tloss%\trelay_s_per_M\tfleet_s_per_M\tfleet/relay\tfleet_rss_MiB")
for (w, tag), fs in sorted(rows.items()):
    m = lambda i: st.median(float(x[i]) for x in fs)
    med[(w, tag)] = m(11)
    print(f"{w}\t{tag}\t{len(fs)}\t{m(5):.2f}\t{m(6):.3f}\t{m(9):.3f}\t{m(10):.3f}\t{m(11):.3f}\t{m(12):.1f}")
for (w, tag), r in sorted(med.items()):
    if tag == "B" and (w, "A") in med:
        print(f"{w}\tB/A of fleet/relay: {r / med[(w, 'A')]:.3f}")
EOF
