#!/usr/bin/env bash
# fleet-pstat.sh: where the fleet's CPU per received message goes, beside
# the floor (issue 34): user and system CPU, system calls, context
# switches and futex calls per received message, from `perf stat` over
# the whole process of each tool, each against a fresh relay, interleaved
# per rep. Counts of calls are steadier than CPU seconds on a loaded host
# (a host without a PMU, as the project's VMs, has no cycle counters).
# sent/write is frames sent a write(2): on time, the bundled capture's
# schedule gives about 1.15; a tool whose sends wait for its reads (the
# floor's one loop on a starved host) bundles more, and pays fewer writes
# for sending late (docs/performance.md, session 9).
# The fleet's figures include its start (reading the capture: about
# 0.3 s of CPU, some 30 ns a message at 8x32 over 12 s), which
# floor-ratio.sh's figure (the summary's fleet_process_cpu_seconds,
# counted from the run's start) leaves out.
#
#   scripts/fleet-pstat.sh                                   # bin/replay and the floor, 8x32, 3 reps, 12 s
#   A=/tmp/old/replay B=bin/replay FLOOR= scripts/fleet-pstat.sh   # two builds, no floor
#   WORKLOADS="8x32 16x32" REPS=5 scripts/fleet-pstat.sh
#
# FLOOR is floorc's source (default ../shared/floor/floorc.c, compiled
# with cc -O2; empty: no floor rows). Needs root (or perf_event_paranoid
# <= -1) for the syscall tracepoints, perf, bin/relay (make build).
# Loopback only; each run is bounded by DURATION plus the fleet's leave.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DURATION=${DURATION:-12}
WORKLOADS=${WORKLOADS:-8x32}
RELAY=${RELAY:-bin/relay}
A=${A:-bin/replay}
B=${B:-}
FLOOR=${FLOOR-../shared/floor/floorc.c}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
floorc=""
if [[ -n $FLOOR ]]; then
	floorc=$OUT/floorc
	cc -O2 -o "$floorc" "$FLOOR"
	script=$(dirname "$FLOOR")/script.txt
fi
events=task-clock,context-switches,cpu-migrations
for s in read write epoll_pwait epoll_pwait2 futex; do events+=",syscalls:sys_enter_$s"; done

run_one() { # WORKLOAD TAG BINARY REP
	local w=$1 tag=$2 bin=$3 rep=$4 rooms=${1%x*} members=${1#*x}
	local log=$OUT/relay-$w-$tag-$rep.log sum=$OUT/summary-$w-$tag-$rep.json ps=$OUT/perf-$w-$tag-$rep.txt
	"$RELAY" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --udp off --log-level warn >"$log" 2>&1 &
	local pid=$! line=""
	for _ in $(seq 50); do line=$(grep -m1 '^listening' "$log" 2>/dev/null || true); [[ -n $line ]] && break; sleep 0.1; done
	local addr murl; addr=$(sed -E 's/.*tcp=([^ ]+).*/\1/' <<<"$line"); murl=http://$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")/metrics
	if [[ $tag == floor ]]; then
		perf stat -o "$ps" -e "$events" -- "$floorc" 127.0.0.1 "${addr##*:}" "$rooms" "$members" "$DURATION" "$script" 100 >"$sum" 2>/dev/null || true
	else
		perf stat -o "$ps" -e "$events" -- "$bin" --capture captures/vr-session.pcap --target "$addr" --clients $((rooms * members)) \
			--room-size "$members" --login-interval 100us --duration "${DURATION}s" --metrics "" --progress-interval 1h \
			--log-level warn --summary "$sum" >/dev/null 2>&1 || true
	fi
	local delivered; delivered=$(curl -fsS "$murl" | awk '$1=="relay_delivered_messages_total" {print $2; f=1} END {if (!f) print 0}')
	kill "$pid"; wait "$pid" 2>/dev/null || true
	python3 - "$w" "$tag" "$rep" "$sum" "$ps" "$delivered" <<'PY'
import json, sys
w, tag, rep, sf, pf, delivered = sys.argv[1:]
delivered = float(delivered)
s = json.load(open(sf))
recv = s.get("messages_received", s.get("received")) or 0
if not recv:
    sys.exit(f"{w} {tag} {rep}: received nothing")
d = {}
for l in open(pf):
    f = l.split()
    if len(f) >= 2 and f[0][0].isdigit():
        v = float(f[0].replace(",", ""))
        if f[1] in ("seconds", "msec") and len(f) > 2:
            d[f[2]] = v
        else:
            d[f[1].replace("syscalls:sys_enter_", "")] = v
k = lambda n: 1000 * d.get(n, 0) / recv
p99 = (s.get("latency_ms") or {}).get("p99", float("nan"))
# Frames a write: the schedule's own bundling when on time (about 1.15
# for the bundled capture); more means sends waited and went out together.
sent = s.get("messages_sent", s.get("sent")) or 0
print(f"{w}\t{tag}\t{rep}\t{recv}\t{1e9*d.get('user',0)/recv:.0f}\t{1e9*d.get('sys',0)/recv:.0f}\t{k('read'):.1f}\t{k('write'):.1f}\t"
      f"{k('epoll_pwait')+k('epoll_pwait2'):.1f}\t{k('futex'):.2f}\t{k('context-switches'):.2f}\t{p99:.1f}\t{100*recv/max(delivered,1):.1f}\t"
      f"{sent/max(d.get('write',0),1):.2f}")
PY
}
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) reps=$REPS duration=${DURATION}s"
printf 'workload\ttool\trep\treceived\tuser_ns/msg\tsys_ns/msg\treads/k\twrites/k\tepoll_waits/k\tfutex/k\tcsw/k\tp99ms\treceived/delivered%%\tsent/write\n'
RES=$OUT/results.tsv; : >"$RES"
for rep in $(seq "$REPS"); do
	tools=("A=$A"); [[ -n $B ]] && tools+=("B=$B"); [[ -n $floorc ]] && tools+=("floor=")
	if ((rep % 2 == 0)); then mapfile -t tools < <(printf '%s\n' "${tools[@]}" | tac); fi
	for w in $WORKLOADS; do for t in "${tools[@]}"; do run_one "$w" "${t%%=*}" "${t#*=}" "$rep" | tee -a "$RES"; done; done
done
echo "# end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$RES" <<'PY'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    f = l.rstrip("\n").split("\t"); rows[(f[0], f[1])].append(f)
print("medians: workload tool n user_ns/msg sys_ns/msg cpu_ns/msg reads/k writes/k epoll_waits/k futex/k csw/k sent/write")
for (w, t), fs in sorted(rows.items()):
    m = lambda i: st.median(float(x[i]) for x in fs)
    print(f"{w}\t{t}\tn={len(fs)}\t{m(4):.0f}\t{m(5):.0f}\t{st.median(float(x[4])+float(x[5]) for x in fs):.0f}\t{m(6):.1f}\t{m(7):.1f}\t{m(8):.1f}\t{m(9):.2f}\t{m(10):.2f}\t{m(13):.2f}")
PY
