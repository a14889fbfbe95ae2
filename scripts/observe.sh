#!/usr/bin/env bash
# make observe: start Prometheus with prometheus/prometheus.yml on 127.0.0.1:9090
# (storage under out/prometheus) and, if grafana-server is installed, Grafana
# with grafana/provisioning on 127.0.0.1:3000, so the relay and fleet
# dashboards show up with no clicks. Ctrl-C stops both.
#
# Environment:
#   OBSERVE_PROM_ADDR     Prometheus listen address (default 127.0.0.1:9090;
#                         the provisioned Grafana datasource expects that one)
#   OBSERVE_GRAFANA_PORT  Grafana HTTP port (default 3000)
#   OBSERVE_OUT           where data and logs go (default out/)
#   OBSERVE_NO_GRAFANA=1  start Prometheus only
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
prom_addr=${OBSERVE_PROM_ADDR:-127.0.0.1:9090}
grafana_port=${OBSERVE_GRAFANA_PORT:-3000}
out=${OBSERVE_OUT:-$root/out}

if ! command -v prometheus >/dev/null; then
	echo "observe: prometheus not found; install Debian's package: sudo apt-get install prometheus" >&2
	exit 1
fi

# The Debian package also installs a prometheus service on :9090; say so
# instead of failing with a bind error further down.
if (exec 3<>"/dev/tcp/${prom_addr%:*}/${prom_addr##*:}") 2>/dev/null; then
	echo "observe: something already listens on $prom_addr (Debian's prometheus service? sudo systemctl stop prometheus), or set OBSERVE_PROM_ADDR" >&2
	exit 1
fi

mkdir -p "$out/prometheus" "$out/grafana/data" "$out/grafana/logs" "$out/grafana/plugins"

pids=()
stop() {
	trap - INT TERM EXIT
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

prometheus \
	--config.file="$root/prometheus/prometheus.yml" \
	--storage.tsdb.path="$out/prometheus" \
	--web.listen-address="$prom_addr" \
	--log.level=warn \
	>"$out/prometheus.log" 2>&1 &
pids+=($!)

grafana_bin=""
if [[ "${OBSERVE_NO_GRAFANA:-}" != 1 ]]; then
	grafana_bin=$(command -v grafana-server || command -v grafana || true)
fi
if [[ -n "$grafana_bin" ]]; then
	homepath=${GRAFANA_HOME:-/usr/share/grafana}
	args=(--homepath "$homepath")
	# Newer packages ship one `grafana` binary with a server subcommand.
	[[ "$(basename "$grafana_bin")" == grafana ]] && args=(server "${args[@]}")
	GF_PATHS_PROVISIONING="$root/grafana/provisioning" \
		GF_PATHS_DATA="$out/grafana/data" \
		GF_PATHS_LOGS="$out/grafana/logs" \
		GF_PATHS_PLUGINS="$out/grafana/plugins" \
		GF_SERVER_HTTP_ADDR=127.0.0.1 \
		GF_SERVER_HTTP_PORT="$grafana_port" \
		GF_AUTH_ANONYMOUS_ENABLED=true \
		GF_AUTH_ANONYMOUS_ORG_ROLE=Admin \
		GF_ANALYTICS_REPORTING_ENABLED=false \
		GF_ANALYTICS_CHECK_FOR_UPDATES=false \
		GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH="$root/grafana/dashboards/relay.json" \
		REPRISE_GRAFANA_DASHBOARDS="$root/grafana/dashboards" \
		"$grafana_bin" "${args[@]}" >"$out/grafana.log" 2>&1 &
	pids+=($!)
fi

# Wait until Prometheus answers, or report why it did not start.
for _ in $(seq 1 100); do
	if (exec 3<>"/dev/tcp/${prom_addr%:*}/${prom_addr##*:}") 2>/dev/null; then
		break
	fi
	if ! kill -0 "${pids[0]}" 2>/dev/null; then
		echo "observe: prometheus exited; last lines of $out/prometheus.log:" >&2
		tail -n 20 "$out/prometheus.log" >&2
		exit 1
	fi
	sleep 0.1
done

echo "Prometheus: http://$prom_addr  (targets: http://$prom_addr/targets; log $out/prometheus.log)"
if [[ -n "$grafana_bin" ]]; then
	echo "Grafana:    http://127.0.0.1:$grafana_port/d/reprise-relay  and  /d/reprise-fleet  (log $out/grafana.log)"
else
	echo "Grafana:    not installed; see README.md \"Observe\" to install it from Grafana's apt repository"
fi
echo "Scraping the relay at 127.0.0.1:9400 and the fleet at 127.0.0.1:9401 (prometheus/prometheus.yml). Ctrl-C stops."

# Run until Ctrl-C or until one of them exits on its own.
wait -n "${pids[@]}" || true
echo "observe: a server exited; stopping" >&2
exit 1
