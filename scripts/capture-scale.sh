#!/usr/bin/env bash
# capture-scale.sh: the capture memory figures of docs/performance.md
# (issue 20), opt-in and slow (minutes; about 1.3 GB of disk in $DIR):
#   - inspect of a generated capture of 300,000 short flows at the
#     default --max-memory, and a replay of one chosen flow of it;
#   - replay of one flow of a generated capture of over 1 GB against a
#     relay on 127.0.0.1.
# Each line: what, seconds, peak RSS (KiB), exit code.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DIR:-$(mktemp -d)}
PORT=${PORT:-17411}
go build -o "$DIR/replay" ./cmd/replay
go build -o "$DIR/relay" ./cmd/relay
go run ./internal/capture/testdata/manyflows -flows 300000 "$DIR/300k.pcap"
go run ./internal/capture/testdata/manyflows -flows 11000 -sends 200 -payload 400 "$DIR/1g.pcap"

measure() { # name, command...
	local name=$1 rc=0
	shift
	/usr/bin/time -f "$name %e s %M KiB" -o "$DIR/time" "$@" >/dev/null 2>"$DIR/err" || rc=$?
	echo "$(cat "$DIR/time" | tail -1) exit $rc"
	[ "$rc" = 0 ] || tail -1 "$DIR/err"
}

measure "inspect 300k flows" "$DIR/replay" inspect "$DIR/300k.pcap"

"$DIR/relay" --listen "127.0.0.1:$PORT" --udp off --metrics off >"$DIR/relay.log" 2>&1 &
relay=$!
trap 'kill $relay 2>/dev/null || true' EXIT
sleep 1
measure "replay flow 150000 of 300k flows" "$DIR/replay" --capture "$DIR/300k.pcap" --flow 150000 \
	--target "127.0.0.1:$PORT" --clients 2 --login-interval 10ms --duration 2s
measure "replay 1 flow of $(($(stat -c %s "$DIR/1g.pcap") >> 20)) MiB" "$DIR/replay" --capture "$DIR/1g.pcap" --flow 5 \
	--target "127.0.0.1:$PORT" --clients 2 --login-interval 10ms --duration 3s
echo "files in $DIR"
