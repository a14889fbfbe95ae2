#!/usr/bin/env bash
# fleet-idle.sh: the fleet's resident memory per idle receive-only client
# (issue 22: at most 8 KiB), per transport, against bin/relay on 127.0.0.1
# (tcp, udp) or bench/'s WebSocket room server bin/wsroom (ws: the
# recording of its scripted client, profile bench/wsroom.yaml; wss: the
# same over TLS, wsroom terminating it with a certificate made here).
#
# For each rep and transport it runs `replay --receive-only` twice against
# a fresh relay: with 1 client (the fixed cost: runtime, capture, tables)
# and with N clients, and reads the replay's VmRSS once every login has
# its result (the fleet's /metrics: logged in plus failed equals N) and
# SETTLE seconds more (the fleet then returns the ramp's garbage), then
# interrupts the replay. Per client is
# (RSS(N) - RSS(1)) / (N - 1). Runs alternate 1 / N so a busy host hurts
# both alike; the medians per transport close the output.
#
#   scripts/fleet-idle.sh                          # 10,000 clients, tcp, udp and ws, 3 reps
#   N=2000 REPS=1 TRANSPORTS=tcp scripts/fleet-idle.sh
#   TRANSPORTS="ws wss" scripts/fleet-idle.sh      # TLS against plaintext (issue 30: at most 2x)
#
# Needs bin/relay, bin/replay, bin/record and (for ws) bin/wsroom (make
# build; cd bench && go build -o ../bin/wsroom ./cmd/wsroom) and an open-file limit above
# N (it raises its own soft limit to 20,000). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-10000}
REPS=${REPS:-3}
TRANSPORTS=${TRANSPORTS:-"tcp udp ws"}
BIN=${BIN:-bin}
SETTLE=${SETTLE:-3}
LOGIN_TIMEOUT=${LOGIN_TIMEOUT:-300}
LOGIN_INTERVAL=${LOGIN_INTERVAL:-150us}
OUT=${OUT:-$(mktemp -d /tmp/fleet-idle.XXXXXX)}
ulimit -n 20000
mkdir -p "$OUT"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_server TRANSPORT LOG: the relay (or for ws, wsroom) in the
# background; sets pid and addr.
start_server() {
	local t=$1 log=$2 line=""
	if [[ $t == ws ]]; then
		"$BIN"/wsroom --listen 127.0.0.1:0 >"$log" 2>&1 &
	elif [[ $t == wss ]]; then
		"$BIN"/wsroom --listen 127.0.0.1:0 --tls-cert "$OUT/cert.pem" --tls-key "$OUT/key.pem" >"$log" 2>&1 &
	else
		"$BIN"/relay --listen 127.0.0.1:0 --metrics off --log-level warn --rate-messages -1 --max-connections -1 --max-connections-per-source -1 --max-rooms-per-source -1 \
			--udp-max-unconfirmed 20000 --udp-max-unconfirmed-per-source 20000 >"$log" 2>&1 &
	fi
	pid=$!
	for _ in $(seq 50); do
		line=$(grep -m1 '^listening' "$log" 2>/dev/null || true)
		[[ -n $line ]] && break
		sleep 0.1
	done
	[[ -n $line ]] || { echo "server did not start: $(cat "$log")" >&2; kill "$pid"; return 1; }
	addr=$(sed -E 's/.*(tcp|ws)=([^ ]+).*/\2/' <<<"$line")
}

# record_ws: the capture the ws runs replay, wsroom's scripted client
# (200 B at 20 Hz for 2 s) through record proxy.
record_ws() {
	local pid addr port rp
	start_server ws "$OUT/wsroom-record.log"
	port=$(free_port)
	"$BIN"/record proxy --listen "127.0.0.1:$port" --upstream "$addr" --out "$OUT/wsroom.pcap" >"$OUT/record.log" 2>&1 &
	rp=$!
	sleep 0.5
	"$BIN"/wsroom client --url "ws://127.0.0.1:$port/ws?room=lobby&user=alice01" --duration 2s >/dev/null
	kill -INT "$rp"
	wait "$rp"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

held_rss() { # held_rss TRANSPORT CLIENTS REP: the replay's VmRSS in KiB while it holds them
	local t=$1 n=$2 rep=$3 capf=(--capture captures/vr-session.pcap)
	[[ $t == udp ]] && capf=(--capture captures/vr-session-udp.pcap)
	[[ $t == ws ]] && capf=(--capture "$OUT/wsroom.pcap" --profile bench/wsroom.yaml --heartbeat 0)
	[[ $t == wss ]] && capf=(--capture "$OUT/wsroom.pcap" --profile bench/wsroom.yaml --heartbeat 0 --tls --tls-ca "$OUT/cert.pem" --login-timeout 60s)
	local log=$OUT/server-$t-$n-$rep.log sum=$OUT/summary-$t-$n-$rep.json pid addr mport
	start_server "$t" "$log"
	mport=$(free_port)
	"$BIN"/replay "${capf[@]}" --target "$addr" --clients "$n" --room-size 100 --receive-only \
		--login-interval "$LOGIN_INTERVAL" --duration 1h --metrics "127.0.0.1:$mport" --progress-interval 1h \
		--log-level warn --summary "$sum" >"$OUT/replay-$t-$n-$rep.log" 2>&1 &
	local rp=$! done=0
	# A replay left behind by an interrupted script would hold the port and
	# 10,000 sockets: stop it with the script.
	trap "kill $rp $pid 2>/dev/null" EXIT
	for _ in $(seq "$LOGIN_TIMEOUT"); do
		sleep 1
		done=$(curl -fsS "http://127.0.0.1:$mport/metrics" 2>/dev/null |
			awk '/^replay_logins_total/ {s += $2} END {print s + 0}' || true)
		((done >= n)) && break
	done
	sleep "$SETTLE"
	local rss mem
	rss=$(awk '/^VmRSS/ {print $2}' "/proc/$rp/status")
	mem=$(curl -fsS "http://127.0.0.1:$mport/metrics" 2>/dev/null |
		awk '$1=="go_memstats_stack_inuse_bytes" {s=$2} $1=="go_memstats_heap_inuse_bytes" {h=$2} END {printf "%.0f %.0f", s/1024, h/1024}' || true)
	kill -INT "$rp"
	wait "$rp" || true
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	local ok
	ok=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['logins_succeeded'])" "$sum")
	echo "$rss $ok $mem"
}

echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) N=$N reps=$REPS out=$OUT"
printf 'transport\trep\tclients\tlogged_in\trss_KiB\tbase_KiB\tKiB_per_client\tstack_KiB\theap_KiB\n'
RES=$OUT/results.tsv
: >"$RES"
if [[ " $TRANSPORTS " == *" wss "* ]]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
		-addext subjectAltName=IP:127.0.0.1 -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>/dev/null
fi
[[ " $TRANSPORTS " == *" ws"* ]] && record_ws
for rep in $(seq "$REPS"); do
	for t in $TRANSPORTS; do
		if ((rep % 2)); then
			read -r base _ _ _ < <(held_rss "$t" 1 "$rep")
			read -r rss ok stack heap < <(held_rss "$t" "$N" "$rep")
		else
			read -r rss ok stack heap < <(held_rss "$t" "$N" "$rep")
			read -r base _ _ _ < <(held_rss "$t" 1 "$rep")
		fi
		per=$(python3 -c "import sys; r,b,n=map(float,sys.argv[1:]); print(f'{(r-b)/(n-1):.2f}')" "$rss" "$base" "$ok")
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$rep" "$N" "$ok" "$rss" "$base" "$per" "$stack" "$heap" | tee -a "$RES"
	done
done
echo "# medians (load now: $(cut -d' ' -f1-3 /proc/loadavg))"
python3 - "$RES" <<'EOF'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows[f[0]].append(float(f[6]))
for t, v in sorted(rows.items()):
    print(f"{t}\tKiB per idle client: median {st.median(v):.2f} (runs: {', '.join(f'{x:.2f}' for x in v)})")
EOF
