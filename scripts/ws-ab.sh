#!/usr/bin/env bash
# ws-ab.sh: a plain WebSocket fleet, two replay builds A/B (issue 31's
# "done when": CPU and memory per client within 5 % of the commit before
# issue 31's work, 9cd6e2c). The server is bench/'s WebSocket room server
# (wsroom, one build for both), the capture its scripted client's session
# recorded through `record proxy` once, the profile bench/wsroom.yaml: a
# plain WebSocket client (no HTTP step, no deflate, one connection), which
# both builds replay unchanged.
#
# Memory: per rep and build, `replay --receive-only` with 1 client and
# with N (fresh server each), VmRSS, Go heap in use and heap plus
# goroutine stacks in use (/metrics: a client's state lives in its reader
# goroutine's stack in one build and in the heap in another) read
# once every login has its result and SETTLE s more; per client is
# (X(N) - X(1)) / (N - 1). Heap bytes do not depend on the host's load.
# CPU: per rep and build, C clients sending in rooms of M for DURATION
# (the 2 s recording's messages looped, LOOP);
# the replay's user+sys CPU (getrusage of the child) over the messages it
# received (deliveries). With CG=1 also cachegrind instructions per
# delivery, which do not depend on load: (Ir(long) - Ir(short)) /
# (received(long) - received(short)) so start-up cancels out.
# Runs interleave A B / B A by rep; the medians and B/A close the output.
#
#   A=/tmp/wsab/A B=/tmp/wsab/B scripts/ws-ab.sh    # A, B: dirs with replay (B also wsroom, record)
#   REPS=3 N=500 C=200 M=10 DURATION=15s CG=1 A=... B=... scripts/ws-ab.sh
#
# Build A with: git worktree add --detach /tmp/wsab/srcA 9cd6e2c &&
# (cd /tmp/wsab/srcA && go build -o /tmp/wsab/A/ ./cmd/replay); B with
# go build -o /tmp/wsab/B/ ./cmd/replay ./cmd/record && (cd bench && go
# build -o /tmp/wsab/B/wsroom ./cmd/wsroom). Loopback only. Opt-in: not
# part of make test.
set -euo pipefail
cd "$(dirname "$0")/.."
A=${A:?A=dir holding the first replay build}
B=${B:?B=dir holding the second replay build, wsroom and record}
REPS=${REPS:-3} N=${N:-500} C=${C:-200} M=${M:-10} DURATION=${DURATION:-15s}
SETTLE=${SETTLE:-3} LOOP=${LOOP:-200ms,1800ms} CG=${CG:-0} CGCLIENTS=${CGCLIENTS:-20} SKIP=${SKIP:-}
OUT=${OUT:-$(mktemp -d /tmp/ws-ab.XXXXXX)}
mkdir -p "$OUT"
ulimit -n 20000
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) reps=$REPS N=$N C=$C M=$M duration=$DURATION out=$OUT"
exec python3 - "$A" "$B" "$REPS" "$N" "$C" "$M" "$DURATION" "$SETTLE" "$CG" "$CGCLIENTS" "$OUT" "$SKIP" "$LOOP" <<'PY'
import json, re, resource, socket, statistics, subprocess, sys, time, urllib.request
A, B, reps, N, C, M, dur, settle, cg, cgclients, out, skip, loop = sys.argv[1:14]
reps, N, C, M, settle, cgclients = int(reps), int(N), int(C), int(M), float(settle), int(cgclients)
bins = {"A": A + "/replay", "B": B + "/replay"}
wsroom, record = B + "/wsroom", B + "/record"
prof = ["--profile", "bench/wsroom.yaml", "--heartbeat", "0"]

sys.path.insert(0, "scripts")
import wsroom as room  # scripts/wsroom.py
port, stop = room.free_port, room.stop

def server(tag):
    return room.start(wsroom, f"{out}/wsroom-{tag}.log")

def metrics(mport):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    vals = {}
    for line in text.splitlines():
        if line.startswith("#"): continue
        parts = line.split()
        if len(parts) < 2: continue
        name = parts[0].split("{")[0]
        vals[name] = vals.get(name, 0) + float(parts[1])
    return vals

# The capture: wsroom's scripted client (200 B at 20 Hz for 2 s) through record proxy.
cap = room.record(wsroom, record, out, "2s")

def held(tag, n, rep):
    """RSS and heap in use (KiB) of replay holding n idle clients."""
    srv, addr = server(f"mem-{tag}-{n}-{rep}")
    mport = port()
    summ = f"{out}/mem-{tag}-{n}-{rep}.json"
    p = subprocess.Popen([bins[tag], "--capture", cap, *prof, "--target", addr, "--clients", str(n),
                          "--room-size", "100", "--receive-only", "--login-interval", "150us", "--duration", "1h",
                          "--metrics", f"127.0.0.1:{mport}", "--progress-interval", "1h", "--log-level", "warn",
                          "--summary", summ], stdout=open(f"{out}/mem-{tag}-{n}-{rep}.log", "w"), stderr=subprocess.STDOUT)
    for _ in range(300):
        time.sleep(0.5)
        if metrics(mport).get("replay_logins_total", 0) >= n: break
    time.sleep(settle)
    rss = int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{p.pid}/status").read()).group(1))
    m = metrics(mport)
    heap = m.get("go_memstats_heap_inuse_bytes", 0) / 1024
    stack = m.get("go_memstats_stack_inuse_bytes", 0) / 1024
    p.send_signal(2); p.wait(); stop(srv)
    ok = json.load(open(summ))["logins_succeeded"]
    if ok != n: sys.exit(f"{tag} rep {rep}: {ok} of {n} logged in; nothing measured")
    return rss, heap, heap + stack

def busy(tag, rep):
    """CPU seconds per million deliveries for C sending clients."""
    srv, addr = server(f"cpu-{tag}-{rep}")
    summ = f"{out}/cpu-{tag}-{rep}.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([bins[tag], "--capture", cap, *prof, "--target", addr, "--clients", str(C), "--room-size", str(M),
                    "--loop", loop, "--login-interval", "1ms", "--duration", dur, "--metrics", "", "--progress-interval", "1h",
                    "--log-level", "warn", "--summary", summ], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    stop(srv)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    s = json.load(open(summ))
    if not s["messages_received"]: sys.exit(f"{tag} rep {rep}: no message received; nothing measured")
    return cpu, s["logins_succeeded"], s["messages_received"], cpu / s["messages_received"] * 1e6

def instructions(tag, d):
    srv, addr = server(f"cg-{tag}-{d}")
    summ, cgout = f"{out}/cg-{tag}-{d}.json", f"{out}/cg-{tag}-{d}.out"
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={cgout}",
                    bins[tag], "--capture", cap, *prof, "--target", addr, "--clients", str(cgclients), "--room-size", str(M),
                    "--loop", loop, "--login-interval", "1ms", "--login-timeout", "60s", "--duration", d, "--metrics", "",
                    "--progress-interval", "1h", "--log-level", "warn", "--summary", summ],
                   stdout=subprocess.DEVNULL, stderr=open(f"{out}/cg-{tag}-{d}.log", "w"))
    stop(srv)
    ir = int(re.search(r"^summary:\s+(\d+)", open(cgout).read(), re.M).group(1))
    return ir, json.load(open(summ))["messages_received"]

def med(xs): return statistics.median(xs)
res = {k: {"rss": [], "heap": [], "go": [], "cpu": [], "ir": []} for k in "AB"}
for rep in range(reps):
    order = "AB" if rep % 2 == 0 else "BA"
    if "mem" not in skip:
        for tag in order:
            r1, h1, g1 = held(tag, 1, rep)
            rn, hn, gn = held(tag, N, rep)
            rss, heap, gomem = (rn - r1) / (N - 1), (hn - h1) / (N - 1), (gn - g1) / (N - 1)
            res[tag]["rss"].append(rss); res[tag]["heap"].append(heap); res[tag]["go"].append(gomem)
            print(f"mem\t{tag}\t{rep}\tRSS {r1}->{rn} KiB\theap {h1:.0f}->{hn:.0f} KiB\t{rss:.2f} KiB/client RSS\t{heap:.2f} KiB/client heap\t{gomem:.2f} KiB/client heap+stacks\tload {open('/proc/loadavg').read().split()[0]}", flush=True)
    if "cpu" not in skip:
        for tag in order:
            cpu, ok, recv, per = busy(tag, rep)
            res[tag]["cpu"].append(per)
            print(f"cpu\t{tag}\t{rep}\tlogins {ok}/{C}\treceived {recv}\tcpu {cpu:.2f}s\t{per:.2f} s per M deliveries\tload {open('/proc/loadavg').read().split()[0]}", flush=True)
if cg == "1":
    for tag in "AB":
        ir1, m1 = instructions(tag, "5s")
        ir2, m2 = instructions(tag, "15s")
        per = (ir2 - ir1) / (m2 - m1) if m2 > m1 else float("nan")
        res[tag]["ir"].append(per)
        print(f"cg\t{tag}\tIr 5s {ir1} ({m1} received)\tIr 15s {ir2} ({m2} received)\t{per:.0f} instructions per delivery", flush=True)
print(f"# medians ({reps} reps, load now {' '.join(open('/proc/loadavg').read().split()[:3])}):")
for key, unit in (("rss", "KiB RSS per idle client"), ("heap", "KiB heap per idle client"),
                  ("go", "KiB heap+stacks per idle client"),
                  ("cpu", "CPU s per M deliveries"), ("ir", "instructions per delivery")):
    if res["A"][key] and res["B"][key]:
        a, b = med(res["A"][key]), med(res["B"][key])
        print(f"#   {unit}: A {a:.2f}  B {b:.2f}  B/A {b / a:.3f}")
PY
