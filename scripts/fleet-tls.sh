#!/usr/bin/env bash
# fleet-tls.sh: what TLS costs the fleet, against bench/'s WebSocket room
# server bin/wsroom on 127.0.0.1 (gorilla/websocket; TLS terminated by
# crypto/tls with a certificate made here by openssl):
#
#   cpu   the fleet's CPU per received message over wss:// and over ws://,
#         N:N, WORKLOAD rooms of members (8x32) replaying wsroom's scripted
#         client; runs interleaved ws/wss, wss/ws; medians and wss/ws
#         (issue 30: at most 1.3x).
#   hs    handshakes per second the fleet opens (receive-only, HS_CLIENTS
#         logins as fast as --login-interval lets them), without and with
#         --tls-resume: the summary's tls.handshakes_per_s and its peak
#         second, and the handshakes resumed.
#
# Idle memory per TLS client is scripts/fleet-idle.sh's (TRANSPORTS="ws wss").
#
#   scripts/fleet-tls.sh                 # cpu and hs, 3 reps
#   REPS=1 PARTS=hs scripts/fleet-tls.sh
#
# Needs bin/replay, bin/record (make build), bin/wsroom (cd bench && go
# build -o ../bin/wsroom ./cmd/wsroom) and openssl. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
PARTS=${PARTS:-"cpu hs"}
DURATION=${DURATION:-15s}
WORKLOAD=${WORKLOAD:-8x32}
HS_CLIENTS=${HS_CLIENTS:-2000}
HS_INTERVAL=${HS_INTERVAL:-100us}
BIN=${BIN:-bin}
OUT=${OUT:-$(mktemp -d /tmp/fleet-tls.XXXXXX)}
ulimit -n 20000
mkdir -p "$OUT"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
	-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>/dev/null
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) parts=$PARTS reps=$REPS workload=$WORKLOAD duration=$DURATION out=$OUT"
python3 - "$REPS" "$PARTS" "$DURATION" "$WORKLOAD" "$HS_CLIENTS" "$HS_INTERVAL" "$BIN" "$OUT" <<'PY'
import json, re, statistics, subprocess, sys, time, socket
reps, parts, dur, workload, hs_clients, hs_interval, bin_, out = sys.argv[1:9]
reps, hs_clients = int(reps), int(hs_clients)
rooms, members = map(int, workload.split("x"))

sys.path.insert(0, "scripts")
import wsroom as room  # scripts/wsroom.py
stop = room.stop

def wsroom(tls, log):
    return room.start(f"{bin_}/wsroom", log, (f"{out}/cert.pem", f"{out}/key.pem") if tls else None)

# The recording: wsroom's scripted client (200 B at 20 Hz) through record proxy.
room.record(f"{bin_}/wsroom", f"{bin_}/record", out, "3s")
insp = subprocess.run([f"{bin_}/replay", "inspect", "--profile", "bench/wsroom.yaml", f"{out}/wsroom.pcap"], capture_output=True, text=True).stdout
loop = re.search(r"suggested --loop=(\S+)", insp)
loop = ["--loop", loop.group(1) if loop else "#1,#59"]

def replay(tls, args, tag):
    srv, addr = wsroom(tls, f"{out}/wsroom-{tag}.log")
    target = f"wss://{addr}/ws" if tls else addr
    summ = f"{out}/summary-{tag}.json"
    tlsargs = ["--tls-ca", f"{out}/cert.pem"] if tls else []
    r = subprocess.run([f"{bin_}/replay", "--capture", f"{out}/wsroom.pcap", "--profile", "bench/wsroom.yaml", "--target", target,
                        "--metrics", "", "--progress-interval", "1h", "--log-level", "warn", "--summary", summ] + tlsargs + args,
                       stdout=open(f"{out}/replay-{tag}.log", "w"), stderr=subprocess.STDOUT)
    stop(srv)
    s = json.load(open(summ))
    return s

if "cpu" in parts:
    n = rooms * members
    print("cpu\trep\tscheme\tlogins\treceived\tcpu_s\tcpu_us_per_received\tlatency_p50_ms\thandshake_p50_ms")
    res = {"ws": [], "wss": []}
    for rep in range(reps):
        order = ["ws", "wss"] if rep % 2 == 0 else ["wss", "ws"]
        for sch in order:
            s = replay(sch == "wss", ["--clients", str(n), "--room-size", str(members), "--login-interval", "2ms", "--duration", dur] + loop, f"cpu-{sch}-{rep}")
            per = s["fleet_process_cpu_seconds"] * 1e6 / max(s["messages_received"], 1)
            res[sch].append(per)
            hs = s.get("tls", {}).get("handshake_ms", {}) if s.get("tls") else {}
            print(f"cpu\t{rep}\t{sch}\t{s['logins_succeeded']}\t{s['messages_received']}\t{s['fleet_process_cpu_seconds']:.2f}\t{per:.3f}\t{s['latency_ms']['p50'] if s['latency_ms'] else '-'}\t{hs.get('p50', '-')}", flush=True)
    a, b = statistics.median(res["ws"]), statistics.median(res["wss"])
    print(f"# cpu µs per received message, medians: ws {a:.3f}, wss {b:.3f}, wss/ws {b/a:.2f}")

if "hs" in parts:
    print("hs\trep\tresume\tlogins\thandshakes\tresumed\tper_s\tpeak_per_s\thandshake_p50_ms\thandshake_p99_ms\tfleet_cpu_s")
    res = {"off": [], "tickets": []}
    for rep in range(reps):
        order = ["off", "tickets"] if rep % 2 == 0 else ["tickets", "off"]
        for mode in order:
            args = ["--clients", str(hs_clients), "--receive-only", "--heartbeat", "0", "--login-interval", hs_interval, "--duration", "20s", "--login-timeout", "30s"]
            if mode == "tickets":
                args.append("--tls-resume")
            s = replay(True, args, f"hs-{mode}-{rep}")
            t = s["tls"]
            res[mode].append(t["handshakes_per_s"])
            print(f"hs\t{rep}\t{mode}\t{s['logins_succeeded']}\t{t['handshakes']}\t{t['resumed']}\t{t['handshakes_per_s']:.0f}\t{t['handshakes_per_s_peak']}\t{t['handshake_ms']['p50']}\t{t['handshake_ms']['p99']}\t{s['fleet_process_cpu_seconds']:.2f}", flush=True)
    print(f"# handshakes/s, medians: full {statistics.median(res['off']):.0f}, resumed {statistics.median(res['tickets']):.0f}")
PY
echo "# load now: $(cut -d' ' -f1-3 /proc/loadavg)"
