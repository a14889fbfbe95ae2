#!/usr/bin/env bash
# Runs every Fuzz* target of the module for a bounded time each (default 10s).
set -euo pipefail
fuzztime=${1:-10s}
cd "$(dirname "$0")/.."
status=0
for file in $(git ls-files '*_test.go'); do
  pkg=./$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
    echo "fuzz $pkg $target ($fuzztime)"
    if ! go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" >"/tmp/fuzz-$target.log" 2>&1; then
      tail -30 "/tmp/fuzz-$target.log"
      status=1
    fi
  done
done
exit $status
