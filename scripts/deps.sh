#!/usr/bin/env bash
# deps.sh TARGET: make sure the Debian packages TARGET (demo or test) needs
# are installed (the list is scripts/debian-packages), and the programs
# installed with go install (scripts/go-tools). Missing ones are
# installed when run as root; otherwise it prints the one command that
# installs them and exits 2. `deps.sh list TARGET` prints TARGET's list.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
list() { # the packages of target $1
  sed -e 's/#.*//' "$here/debian-packages" | awk -v t="$1" 'NF > 1 { for (i = 2; i <= NF; i++) if ($i == t) print $1 }'
}
usage() { echo "usage: $0 [list] demo|test" >&2; exit 2; }
[ $# -ge 1 ] || usage
if [ "$1" = list ]; then
  [ $# -eq 2 ] || usage
  list "$2" | tr '\n' ' ' | sed 's/ $/\n/'
  exit 0
fi
target=$1
want=$(list "$target")
gotools() { sed -e 's/#.*//' "$here/go-tools" | awk 'NF >= 3'; }
# A target may need only go-installed programs (bench-fleet: k6).
[ -n "$want" ] || gotools | awk -v t="$target" '{ for (i = 3; i <= NF; i++) if ($i == t) f = 1 } END { exit !f }' ||
  { echo "deps: nothing listed for $target in $here/debian-packages or go-tools" >&2; exit 2; }
if ! command -v go >/dev/null; then
  echo "deps: go is not on PATH: install Go 1.26 (https://go.dev/dl/) and add it to PATH (/usr/local/go/bin)" >&2
  exit 2
fi
if ! command -v dpkg-query >/dev/null; then
  echo "deps: not a Debian system; make sure these (Debian names) are installed: $(echo $want)" >&2
  exit 0
fi
missing=()
for p in $want; do
  # A package named after a program already on PATH counts as there: npm
  # comes with NodeSource's nodejs, which conflicts with Debian's npm.
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ] && ! command -v "$p" >/dev/null; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  install="apt-get install -y --no-install-recommends ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "deps: make $target needs Debian packages that are missing; run: sudo apt-get update && sudo $install" >&2
    exit 2
  fi
  echo "deps: make $target: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists yet.
  apt-get update -q >&2
  $install >&2
fi
# Programs installed with go install (scripts/go-tools), after the Debian
# packages: go install needs ca-certificates.
gomissing=()
while read -r mod bin targets; do
  case " $targets " in *" $target "*) ;; *) continue ;; esac
  command -v "$bin" >/dev/null || gomissing+=("$mod")
done < <(gotools)
for mod in "${gomissing[@]}"; do
  if [ "$(id -u)" != 0 ]; then
    echo "deps: make $target needs a program that is missing; run: sudo env PATH=\"\$PATH\" GOBIN=/usr/local/bin go install $mod" >&2
    exit 2
  fi
  echo "deps: make $target: go install $mod" >&2
  GOBIN=/usr/local/bin go install "$mod" >&2
done
