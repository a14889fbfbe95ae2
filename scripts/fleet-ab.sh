#!/usr/bin/env bash
# fleet-ab.sh: the fleet's CPU per message, two replay binaries A/B in one
# run (interleaved), against one bin/relay per run on 127.0.0.1: N:N,
# R rooms of M members, every member replaying the bundled capture.
# Prints one line per run (replay user+sys CPU over messages sent plus
# received) and the medians per binary, and B/A.
#
#   A=/tmp/old/replay B=bin/replay scripts/fleet-ab.sh
#   REPS=5 DURATION=15s WORKLOAD=16x32 A=... B=... scripts/fleet-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DURATION=${DURATION:-15s}
WORKLOAD=${WORKLOAD:-16x32}
RELAY=${RELAY:-bin/relay}
A=${A:?A=path of the first replay binary}
B=${B:?B=path of the second replay binary}
EXTRA=${EXTRA:-}
OUT=${OUT:-$(mktemp -d /tmp/fleet-ab.XXXXXX)}
rooms=${WORKLOAD%x*} members=${WORKLOAD#*x}
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) workload=$WORKLOAD reps=$REPS duration=$DURATION out=$OUT"
python3 - "$REPS" "$DURATION" "$rooms" "$members" "$RELAY" "$A" "$B" "$OUT" "$EXTRA" <<'PY'
import json, os, re, resource, statistics, subprocess, sys, time
reps, dur, rooms, members, relay, a, b, out, extra = sys.argv[1:10]
rows = {"A": [], "B": []}
def run(tag, binary, rep):
    log = open(f"{out}/relay-{tag}-{rep}.log", "w+")
    r = subprocess.Popen([relay, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--log-level", "warn"], stdout=log, stderr=log)
    addr = None
    for _ in range(100):
        log.seek(0)
        m = re.search(r"tcp=(\S+)", log.read())
        if m:
            addr = m.group(1); break
        time.sleep(0.1)
    if not addr:
        r.kill(); sys.exit("relay did not start")
    summ = f"{out}/summary-{tag}-{rep}.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([binary, "--capture", "captures/vr-session.pcap", "--target", addr,
                    "--clients", str(int(rooms) * int(members)), "--room-size", members,
                    "--login-interval", "100us", "--duration", dur, "--metrics", "",
                    "--progress-interval", "1h", "--log-level", "warn", "--summary", summ] + extra.split(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    r.terminate(); r.wait()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    s = json.load(open(summ))
    msgs = s["messages_sent"] + s["messages_received"]
    per = cpu / msgs * 1e6 if msgs else float("nan")
    rows[tag].append(per)
    print(f"{tag}\t{rep}\tlogins {s['logins_succeeded']}/{s['clients_requested']}\tsent {s['messages_sent']}\treceived {s['messages_received']}\tcpu {cpu:.2f}s\t{per:.3f} s/M", flush=True)
for rep in range(int(reps)):
    order = [("A", a), ("B", b)] if rep % 2 == 0 else [("B", b), ("A", a)]
    for tag, binary in order:
        run(tag, binary, rep)
ma, mb = statistics.median(rows["A"]), statistics.median(rows["B"])
print(f"# medians: A {ma:.3f} s/M, B {mb:.3f} s/M, B/A {mb/ma:.3f} (load now {open('/proc/loadavg').read().split()[:3]})")
PY
