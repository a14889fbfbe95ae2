#!/usr/bin/env bash
# make captures: re-record the bundled captures with `record live` on lo
# (needs root or CAP_NET_RAW). Two members of room "lobby": alice (the
# recorded session, 60 s) and bob (a peer, so casts have receivers and
# unicasts a target), talking to the reference relay.
#   PORT (default 7400) is the relay's port; it must be free.
#   TRANSPORTS (default "tcp udp") picks which captures to re-record.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-7400}
BIN=${BIN:-bin}
go build -o "$BIN/" ./cmd/relay ./cmd/record ./examples/vrclient
SECONDS_LONG=${DURATION:-60}

if ss -ltn "sport = :$PORT" | grep -q LISTEN; then
  echo "captures: port $PORT is in use; run with PORT=another" >&2
  exit 1
fi

record_one() { # transport out
  local transport=$1 out=$2 pids=()
  "$BIN/relay" --listen "127.0.0.1:$PORT" --metrics off &
  pids+=($!)
  trap 'kill "${pids[@]}" 2>/dev/null || true' RETURN
  sleep 0.5
  "$BIN/record" live --iface lo --port "$PORT" --proto "$transport" --out "$out" &
  local rec=$!
  sleep 1
  "$BIN/vrclient" --target "127.0.0.1:$PORT" --transport "$transport" --room lobby --user alice \
    --seed 1 --duration "${SECONDS_LONG}s" --heartbeat 15s &
  local alice=$!
  sleep 1
  "$BIN/vrclient" --target "127.0.0.1:$PORT" --transport "$transport" --room lobby --user bob \
    --seed 2 --duration "$((SECONDS_LONG - 3))s" --heartbeat 15s
  wait "$alice"
  sleep 0.5
  kill -INT "$rec"
  wait "$rec"
}

for transport in ${TRANSPORTS:-tcp udp}; do
  case $transport in
    tcp) record_one tcp captures/vr-session.pcap ;;
    udp) record_one udp captures/vr-session-udp.pcap ;;
    *) echo "captures: TRANSPORTS: $transport is not tcp or udp" >&2; exit 1 ;;
  esac
done
ls -l captures/*.pcap
