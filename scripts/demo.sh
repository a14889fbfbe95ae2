#!/usr/bin/env bash
# make demo: replay the bundled capture as N:N (200 clients, all send) and
# 1:N (20 senders, 180 listeners) against the relay binary, started by
# replay as its own process on 127.0.0.1,
# with the same login ramp (one login every 250 ms, a 10 s pause after 100),
# and write the comparison report. About 3 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
capture=captures/vr-session.pcap
if [ ! -f "$capture" ]; then
  echo "demo: $capture is missing (captures/record.sh records it)" >&2
  exit 1
fi
out="out/demo-$(date +%Y%m%d-%H%M%S)"
# The capture is 60 s long and its login ends at 0.02 s; 12s..48s is the
# steady middle every sender repeats (captures/README.md).
# The relay child shares this host with 200 clients: the host's CPU idle
# is mostly the fleet's, so the relay is judged by drops, logins and
# latency (idle=off); the fleet's own saturation still marks "≥".
bin/replay compare --capture "$capture" --clients 200 --senders 20 --loop=12s,48s \
  --login-interval 250ms --pause-every 100 --pause 10s --duration 80s --slo idle=off \
  --progress-interval 10s --out "$out"
# compare's last lines are the answer: how many users each scenario held
# and why it stopped there (the first line of $out/index.html too).
