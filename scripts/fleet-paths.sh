#!/usr/bin/env bash
# fleet-paths.sh: where the fleet's user-space time per received message
# goes, by the loop it is spent in (issue 34): docs/performance.md's "by
# path" table. It runs bin/replay against a fresh bin/relay on 127.0.0.1,
# samples the replay process with perf (call graphs) for WINDOW seconds
# in the middle of the run, and puts each user-space sample in the first
# path its stack matches: the poller's reads and what they call (decode,
# loss tracking, latency), the poller's turn (its events and prefetches),
# a client's own reader goroutine (UDP, TLS), the scheduler's sends, its
# flushes and its own loop, and the Go runtime's parks and yields. Kernel
# samples are counted, not split.
#
# ns/msg is samples / FREQ per message received in the window, the
# window's messages taken as the run's times WINDOW/DURATION (the rate is
# steady after the ramp, which ends in the first second at the default
# login interval). Per-sample attribution is what perf's software clock
# gives on a host without hardware counters: compare runs of one host in
# one sitting, A and B interleaved (REPS, B).
#
#   scripts/fleet-paths.sh                              # N:N 8x32 over TCP, bin/replay
#   EXTRA="--senders 8" scripts/fleet-paths.sh          # 1:N: 8 senders, the rest receive only
#   B=/tmp/new/replay REPS=3 scripts/fleet-paths.sh     # two builds, interleaved
#   WORKLOAD=16x32 CAPTURE=captures/vr-session-udp.pcap scripts/fleet-paths.sh
#
# Needs root (or perf_event_paranoid <= 1), perf, python3, bin/relay and
# bin/replay (make build). Loopback only; each run is bounded by DURATION
# plus the fleet's leave.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-1}
DURATION=${DURATION:-15}
WINDOW=${WINDOW:-8}
FREQ=${FREQ:-2999}
WORKLOAD=${WORKLOAD:-8x32}
CAPTURE=${CAPTURE:-captures/vr-session.pcap}
EXTRA=${EXTRA:-}
RELAY=${RELAY:-bin/relay}
A=${A:-bin/replay}
B=${B:-}
OUT=${OUT:-$(mktemp -d /tmp/fleet-paths.XXXXXX)}
mkdir -p "$OUT"
((WINDOW + 4 < DURATION)) || { echo "fleet-paths: WINDOW ($WINDOW s) must end before the run (DURATION $DURATION s, sampling from 4 s)" >&2; exit 2; }
command -v perf >/dev/null || { echo "fleet-paths: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
rooms=${WORKLOAD%x*} members=${WORKLOAD#*x}

run_one() { # TAG BINARY REP
	local tag=$1 bin=$2 rep=$3 line="" addr
	local log=$OUT/relay-$tag-$rep.log sum=$OUT/summary-$tag-$rep.json data=$OUT/perf-$tag-$rep.data
	"$RELAY" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --log-level warn >"$log" 2>&1 &
	local rpid=$!
	for _ in $(seq 50); do line=$(grep -m1 '^listening' "$log" 2>/dev/null || true); [[ -n $line ]] && break; sleep 0.1; done
	[[ -n $line ]] || { kill "$rpid"; echo "fleet-paths: the relay did not start (see $log)" >&2; exit 1; }
	addr=$(sed -E 's/.*tcp=([^ ]+).*/\1/' <<<"$line")
	# shellcheck disable=SC2086 # EXTRA is flags, split on purpose
	"$bin" --capture "$CAPTURE" --target "$addr" --clients $((rooms * members)) --room-size "$members" \
		--login-interval 100us $EXTRA --duration "${DURATION}s" --metrics "" --progress-interval 1h \
		--log-level warn --summary "$sum" >"$OUT/replay-$tag-$rep.log" 2>&1 &
	local tpid=$!
	sleep 4
	perf record -F "$FREQ" -g -o "$data" -p "$tpid" -- sleep "$WINDOW" >/dev/null 2>&1 || true
	wait "$tpid" || true
	kill "$rpid"; wait "$rpid" 2>/dev/null || true
	perf script -F ip,sym,dso -i "$data" 2>/dev/null >"$OUT/stacks-$tag-$rep.txt"
	python3 - "$OUT/stacks-$tag-$rep.txt" "$sum" "$tag" "$rep" "$FREQ" "$WINDOW" "$DURATION" <<'PY' | tee "$OUT/paths-$tag-$rep.tsv"
import json, sys, collections
stacks, sumf, tag, rep = sys.argv[1:5]
freq, window, duration = map(float, sys.argv[5:8])
# The first rule a stack matches (any frame containing the text) names
# its path; the order puts the fleet's loops before the runtime's.
RULES = [
    ("runtime.gosched_m", "runtime: yields"),
    ("runtime.park_m", "runtime: parks and wakes"),
    ("runtime.gcBgMarkWorker", "runtime: GC"),
    ("runtime.mstart", "runtime: idle threads, sysmon"),
    ("(*scheduler).flushSends", "send: batched writes"),
    ("(*client).send", "send: plan, encode"),
    ("(*scheduler).run", "send: scheduler's loop"),
    ("(*poller).readRound", "receive: read, decode, loss, latency"),
    ("(*poller).readClient", "receive: read, decode, loss, latency"),
    ("(*poller).turn", "receive: poller's turn"),
    ("(*poller).run", "receive: poller's wait"),
    ("(*client).readUntilEnd", "receive: a client's own reader (UDP, TLS, before the poller)"),
]
paths = collections.Counter()
leaves = collections.defaultdict(collections.Counter)
total = user = 0
def flush(st):
    global total, user
    if not st:
        return
    total += 1
    if "kernel" in st[0][1]:
        return
    user += 1
    path = next((name for pat, name in RULES if any(pat in s for s, _ in st)), None)
    if path is None:  # every goroutine's stack ends in the runtime: name it by the leaf
        path = "runtime: other" if st[0][0].startswith(("runtime.", "internal/runtime", "gc")) else "other"
    paths[path] += 1
    leaves[path][st[0][0]] += 1
st = []
for line in open(stacks, errors="replace"):
    line = line.strip()
    if not line:
        flush(st); st = []
        continue
    parts = line.split(None, 1)
    if len(parts) == 2:
        sym, _, dso = parts[1].rpartition(" (")
        st.append((sym, dso))
flush(st)
s = json.load(open(sumf))
recv = s.get("messages_received") or 0
if not recv or not total:
    sys.exit(f"fleet-paths: {tag} rep {rep}: nothing measured (received {recv}, samples {total})")
msgs = recv * window / duration
ns = lambda n: n / freq / msgs * 1e9
lat = s.get("latency_ms") or {}
print(f"# {tag} rep {rep}: received {recv}, samples {total}, user {user} ({100*user/total:.1f} %), "
      f"user {ns(user):.0f} ns/msg, latency p50 {lat.get('p50')} p99 {lat.get('p99')} ms")
for path, n in sorted(paths.items(), key=lambda kv: -kv[1]):
    top = ", ".join(f"{k.split('/')[-1]} {v}" for k, v in leaves[path].most_common(4))
    print(f"{tag}\t{rep}\t{path}\t{n}\t{ns(n):.1f}\t{top}")
print(f"{tag}\t{rep}\tuser, all\t{user}\t{ns(user):.1f}\t")
PY
}

echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) workload=$WORKLOAD reps=$REPS duration=${DURATION}s window=${WINDOW}s freq=${FREQ} extra='$EXTRA' out=$OUT"
printf 'tool\trep\tpath\tsamples\tns/msg\tleaf functions (samples)\n'
for rep in $(seq "$REPS"); do
	tools=("A=$A"); [[ -n $B ]] && tools+=("B=$B")
	if ((rep % 2 == 0)); then mapfile -t tools < <(printf '%s\n' "${tools[@]}" | tac); fi
	for t in "${tools[@]}"; do run_one "${t%%=*}" "${t#*=}" "$rep"; done
done
echo "# end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
