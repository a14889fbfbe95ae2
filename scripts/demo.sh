#!/usr/bin/env bash
# make demo: replays the bundled capture as a fleet against an embedded relay.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x bin/replay ] || ! bin/replay --help >/dev/null 2>&1; then
  echo "demo: not yet: the replay fleet is not built yet (see issues)."
  exit 0
fi
exec bin/replay compare --capture captures/vr-session.pcap --clients 200 --senders 20 --loop=12s,48s \
  --login-interval 200ms --pause-every 100 --pause 10s --duration 40s
