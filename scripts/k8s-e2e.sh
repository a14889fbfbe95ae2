#!/usr/bin/env bash
# k8s-e2e.sh: the fleet as shards on a real one-node Kubernetes on this
# machine, end to end (`make k8s-e2e`; opt-in, root, not part of make test).
#
# Brings up Kubernetes v1.33.13 (binaries from scripts/k8s-build.sh, cached
# in $K8S_CACHE), Debian's containerd and etcd, and a minimal CoreDNS, as
# plain processes; loads the images `make k8s-images` wrote; then, with
# `replay k8s run` and the relay Deployment:
#   (a) an Indexed Job of 4 shards x 500 receive-only clients;
#   (b) a 4-shard N:N run, and the same run as one process on the host;
#   (c) a run whose image does not exist, which must fail naming the pod;
#   (d) `replay capacity --k8s` and (e) `replay compare --k8s`: the driver
#       here, each fleet a Job of shard pods, the report written here;
#   (f) a run that cannot be scheduled, refused before anything is created;
#   (g) Ctrl-C of `replay k8s run`, (h) of `replay compare --k8s`: the
#       shards stopped, what they ran merged and reported;
# and before it all (0) a fixed port the cluster needs, held by another
# program: refused up front, naming the port and the program;
# checks (tools/k8scheck): 2,000/2,000 logins, every shard started within
# 50 ms of the barrier's instant times the host's load per CPU (a busy host
# wakes a process late whatever the barrier did), merged counts = the
# shards' sum, merged p50/p99 = the union histogram's over a run with
# stamps (non-empty), sharded N:N within 1 % of one process (its relay on a
# free port, checked to be the process this script started) on sent and
# received, pods Succeeded and the Job complete, each report's headline
# against its own series.csv; and tears it all down, checking that no
# process, bridge, iptables rule, mount or sysctl change is left behind.
# Every failure prints a FAIL line naming it.
#
# `k8s-e2e.sh up` leaves the cluster up to try `replay k8s run` by hand;
# `k8s-e2e.sh down` tears it down and compares the host with before.
#
# Pod traffic stays on this machine: the pod network is a bridge this script
# creates (10.232.0.0/24, the node at .1) with forwarding to and from any
# other interface dropped; CoreDNS has no forwarder.
set -eEuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${K8S_CACHE:-/var/cache/reprise-k8s}
B=$cache/bin
K=$cache/run            # the cluster's state: wiped before and after
S=$cache/host-before    # the host as it was, to compare after teardown
P=$K/pki
out=${K8S_E2E_OUT:-$here/out/k8s-e2e}
BR=reprisek8s0
NODE_IP=10.232.0.1
POD_NET=10.232.0.0/24
SVC_NET=10.233.0.0/24
export KUBECONFIG=$P/admin.kubeconfig
export PATH=$B:$PATH
replay=$here/bin/static/replay
relay=$here/bin/static/relay
images=$here/bin/images

# The kernel settings kubelet, kube-proxy and the CNI plugin may change.
sysctls="net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
net.bridge.bridge-nf-call-ip6tables vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.netfilter.nf_conntrack_max
net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait net.ipv6.conf.all.forwarding"

# Host paths kubelet, containerd and the CNI plugins write to outside the
# run directory: what they add is removed.
# (/run/netns is shared with others' tests: only our cni-* entries go.)
hostpaths="/var/log/pods /var/log/containers /var/lib/cni /run/containerd /var/lib/kubelet /etc/kubernetes"

t_start=$(date +%s)
say() { printf 'k8s-e2e [%4ds] %s\n' $(( $(date +%s) - t_start )) "$*"; }
die() { say "FAIL: $*"; exit 1; }
# A command that fails under set -e says which, and where.
trap 'rc=$?; say "FAIL: line $LINENO: $BASH_COMMAND (exit $rc)"' ERR

[ "$(id -u)" = 0 ] || { echo "k8s-e2e: needs root (a bridge, iptables rules, containerd)"; exit 1; }
[ -x "$replay" ] && [ -f "$images/images.json" ] || { echo "k8s-e2e: run make k8s-images first (make k8s-e2e does)"; exit 1; }

# ---- the host before, and after ----

iptables_state() { for t in filter nat mangle raw; do $1 -t $t -S 2>/dev/null | sed "s/^/$t /"; done | sort; }

host_snapshot() {
	local d=$1
	mkdir -p "$d"
	awk '{print $2, $3}' /proc/mounts | sort >"$d/mounts"
	ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort >"$d/links"
	iptables_state iptables >"$d/iptables"
	iptables_state ip6tables >"$d/ip6tables"
	for k in $sysctls; do echo "$k=$(sysctl -n "$k" 2>/dev/null || echo absent)"; done >"$d/sysctl"
	local p
	for p in $hostpaths; do
		if [ -e "$p" ]; then ls -A "$p" | sed "s|^|$p/|"; else echo "$p absent"; fi
	done >"$d/paths"
	find /sys/fs/cgroup -maxdepth 3 -type d -name 'kubepods*' 2>/dev/null | sort >"$d/cgroups"
	ls /run/netns 2>/dev/null | sort >"$d/netns" || true
}

# restore_paths removes what the cluster added to the host paths.
restore_paths() {
	local p e
	[ -f "$S/paths" ] || return 0
	for p in $hostpaths; do
		if grep -qx "$p absent" "$S/paths"; then
			[ -e "$p" ] && rm -rf "$p"
			continue
		fi
		[ -d "$p" ] || continue
		for e in $(ls -A "$p"); do
			grep -qx "$p/$e" "$S/paths" || rm -rf "${p:?}/$e"
		done
	done
}

# ---- processes: each started here, stopped by its PID ----

start() {
	local n=$1
	shift
	nohup nice -n "${NICE:-5}" "$@" >"$K/logs/$n.log" 2>&1 &
	echo $! >"$K/pids/$n"
}

stop() {
	local f=$K/pids/$1 pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$f"
}

waitfor() { # command, seconds
	local i
	for i in $(seq 1 "$2"); do eval "$1" >/dev/null 2>&1 && return 0; sleep 1; done
	return 1
}

ctr_() { ctr -a "$K/containerd/containerd.sock" -n k8s.io "$@"; }

subst() { sed -e "s|@K8S_DIR@|$K|g" -e "s|@PAUSE_IMAGE@|${pause_image:-}|g" "$1" >"$2"; }

# ---- PKI: a CA and one certificate per component, with openssl ----

pki() {
	mkdir -p "$P"
	(
		cd "$P"
		openssl genrsa -out ca.key 2048 2>/dev/null
		openssl req -x509 -new -nodes -key ca.key -subj "/CN=reprise-k8s-e2e-ca" -days 2 -out ca.crt 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		mk() { # name CN O usage SAN
			openssl genrsa -out "$1.key" 2048 2>/dev/null
			openssl req -new -key "$1.key" -subj "/CN=$2${3:+/O=$3}" -out "$1.csr" 2>/dev/null
			printf "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s\n" "$4" "${5:-}" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
		}
		mk apiserver kube-apiserver "" serverAuth "subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:10.233.0.1"
		mk kubelet-serving k8snode "" serverAuth "subjectAltName=DNS:k8snode,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP"
		mk apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
		mk admin kubernetes-admin system:masters clientAuth
		mk controller-manager system:kube-controller-manager "" clientAuth
		mk scheduler system:kube-scheduler "" clientAuth
		mk kubelet system:node:k8snode system:nodes clientAuth
		mk kube-proxy system:kube-proxy "" clientAuth
		for u in admin controller-manager scheduler kubelet kube-proxy; do
			cat >"$u.kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters:
- cluster: {certificate-authority: $P/ca.crt, server: "https://$NODE_IP:6443"}
  name: local
users:
- name: $u
  user: {client-certificate: $P/$u.crt, client-key: $P/$u.key}
contexts:
- context: {cluster: local, user: $u}
  name: local
current-context: local
EOK
		done
	)
}

# ---- up ----

# The fixed loopback ports the cluster's processes listen on (the others
# are on the bridge's address, which is this script's own).
host_ports="12379:etcd 12380:etcd 12381:etcd 10257:kube-controller-manager 10259:kube-scheduler 10248:kubelet
10249:kube-proxy 10256:kube-proxy 18181:coredns 18182:coredns"

# ports_taken names each of host_ports another program listens on (and
# the program): a component that cannot bind would otherwise show only as
# one that never became ready, minutes later.
ports_taken() {
	local pp port holder
	for pp in $host_ports; do
		port=${pp%%:*}
		holder=$(ss -ltnpH "sport = :$port" | awk '{print $4, $6}' | head -1)
		[ -z "$holder" ] || echo "port $port (for ${pp#*:}) is taken: $holder"
	done
}

# check_port_refusal: with one of the cluster's ports held by a program
# started here, the check must name the port and the program.
check_port_refusal() {
	local pid taken
	say "(0) a port the cluster needs, taken: refused before anything starts, naming it"
	"$relay" --listen 127.0.0.1:18182 --metrics off >"$out/port-holder.log" 2>&1 &
	pid=$!
	waitfor "ss -ltnpH 'sport = :18182' | grep -q 'pid=$pid,'" 20 || { kill $pid 2>/dev/null || true; die "(0) could not hold port 18182 for the check (log: $out/port-holder.log)"; }
	taken=$(ports_taken)
	kill $pid 2>/dev/null || true
	wait $pid 2>/dev/null || true
	echo "$taken" | sed 's/^/    /'
	echo "$taken" | grep -q "port 18182 (for coredns) is taken: .*\"relay\",pid=$pid," || die "(0) a taken port is not named with its program: '$taken'"
}

up() {
	local t0 taken
	t0=$(date +%s)
	taken=$(ports_taken)
	[ -z "$taken" ] || die "$(echo "$taken" | paste -sd ';' -); stop that program or free the port"
	ip route show | grep -qE "^(10\.232\.0\.|10\.233\.0\.)" && die "$POD_NET or $SVC_NET is already routed on this host"
	ip link show "$BR" >/dev/null 2>&1 && die "bridge $BR exists: another run? (scripts/k8s-e2e.sh cleans up after itself; remove it by hand)"
	rm -rf "$K"
	mkdir -p "$K/pids" "$K/logs" "$K/containerd" "$K/cni/net.d" "$K/dns" "$K/kubelet"
	pki
	echo "nameserver $NODE_IP" >"$K/resolv.conf"
	pause_image=$("$replay" k8s image --program "pause=$B/pause" --out "$K/img")
	subst deploy/k8s-e2e/conf/containerd.toml "$K/containerd/config.toml"
	subst deploy/k8s-e2e/conf/kubelet-config.yaml "$K/kubelet-config.yaml"
	subst deploy/k8s-e2e/conf/10-reprise.conflist "$K/cni/net.d/10-reprise.conflist"
	subst deploy/k8s-e2e/conf/Corefile "$K/dns/Corefile"

	# The pod network: a bridge of our own; nothing forwarded to or from
	# any other interface.
	ip link add "$BR" type bridge
	ip addr add "$NODE_IP/24" dev "$BR"
	ip link set "$BR" up
	iptables -I FORWARD -s "$POD_NET" ! -o "$BR" -j DROP
	iptables -I FORWARD -d "$POD_NET" ! -i "$BR" -j DROP

	# The control plane runs at nice 5 on this shared host; the pods (under
	# containerd) at 0: their start and timing are what is measured.
	NICE=0 start containerd containerd --config "$K/containerd/config.toml"
	start etcd etcd --name k8s --data-dir "$K/etcd" --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
		--listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 --initial-cluster k8s=http://127.0.0.1:12380 \
		--listen-metrics-urls http://127.0.0.1:12381
	waitfor "ctr_ version" 30 || die "containerd did not start (logs: $K/logs/containerd.log)"
	for t in "$K/img/pause.tar" "$images/replay.tar" "$images/relay.tar"; do
		ctr_ images import --all-platforms "$t" >/dev/null || die "ctr images import $t"
	done

	start kube-apiserver "$B/kube-apiserver" --advertise-address=$NODE_IP --bind-address=$NODE_IP --secure-port=6443 \
		--etcd-servers=http://127.0.0.1:12379 --service-cluster-ip-range=$SVC_NET \
		--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
		--kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname --kubelet-certificate-authority="$P/ca.crt" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local --service-account-key-file="$P/sa.pub" \
		--service-account-signing-key-file="$P/sa.key" --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--profiling=false --v=1
	waitfor "kubectl get --raw /readyz" 120 || die "kube-apiserver not ready (logs: $K/logs/kube-apiserver.log)"
	start kube-controller-manager "$B/kube-controller-manager" --kubeconfig="$P/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$P/controller-manager.kubeconfig" --authorization-kubeconfig="$P/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --root-ca-file="$P/ca.crt" --service-account-private-key-file="$P/sa.key" \
		--cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" --use-service-account-credentials=true \
		--service-cluster-ip-range=$SVC_NET --leader-elect=false --profiling=false --v=1
	start kube-scheduler "$B/kube-scheduler" --kubeconfig="$P/scheduler.kubeconfig" \
		--authentication-kubeconfig="$P/scheduler.kubeconfig" --authorization-kubeconfig="$P/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false --v=1
	start kubelet "$B/kubelet" --config="$K/kubelet-config.yaml" --kubeconfig="$P/kubelet.kubeconfig" \
		--root-dir="$K/kubelet" --cert-dir="$K/kubelet/pki" --hostname-override=k8snode --node-ip=$NODE_IP --v=1
	# conntrack-* 0: leave the host's conntrack settings as they are.
	start kube-proxy "$B/kube-proxy" --kubeconfig="$P/kube-proxy.kubeconfig" --hostname-override=k8snode --bind-address=$NODE_IP \
		--cluster-cidr=$POD_NET --proxy-mode=iptables --nodeport-addresses=$NODE_IP/32 --conntrack-max-per-core=0 \
		--conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
		--metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 --v=1
	start coredns "$B/coredns" -conf "$K/dns/Corefile"
	waitfor "kubectl get node k8snode -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -q True" 180 ||
		die "node not Ready (logs: $K/logs/kubelet.log)"
	waitfor "kubectl -n default get serviceaccount default" 60 || die "no default service account"
	# Ready comes before the node controller lifts its not-ready taint; a
	# run reads the nodes' room then and would find none.
	waitfor "[ -z \"\$(kubectl get node k8snode -o jsonpath='{.spec.taints}')\" ]" 60 || die "node k8snode keeps its taints: $(kubectl get node k8snode -o jsonpath='{.spec.taints}')"
	say "cluster up in $(( $(date +%s) - t0 ))s (warm start: binaries cached)"
}

# ---- down: everything up made, by PID, path and name ----

down() {
	local t0 n t c m
	t0=$(date +%s)
	for n in coredns kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver; do stop $n; done
	if [ -S "$K/containerd/containerd.sock" ]; then
		for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
		sleep 1
		for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
		for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$c" >/dev/null 2>&1 || true; done
	fi
	stop containerd
	stop etcd
	# containerd's shims outlive it: ours are the ones on our socket.
	for n in $(pgrep -f "containerd-shim-runc-v2 .*-address $K/containerd/containerd.sock" 2>/dev/null); do kill -9 "$n" 2>/dev/null || true; done
	for m in $(awk -v k="$K/" 'index($2, k) == 1 || $2 ~ "^/run/netns/cni-" {print $2}' /proc/mounts | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	for n in $(ls /run/netns 2>/dev/null | grep '^cni-' || true); do
		grep -qx "$n" "$S/netns" 2>/dev/null || ip netns delete "$n" 2>/dev/null || true
	done
	[ -x "$B/kube-proxy" ] && "$B/kube-proxy" --cleanup >/dev/null 2>&1 || true
	for ipt in iptables ip6tables; do
		# kubelet's firewall chain is jumped to from INPUT and OUTPUT.
		$ipt -D INPUT -j KUBE-FIREWALL 2>/dev/null || true
		$ipt -D OUTPUT -j KUBE-FIREWALL 2>/dev/null || true
		for t in filter nat mangle; do
			for c in KUBE-KUBELET-CANARY KUBE-PROXY-CANARY KUBE-FIREWALL KUBE-MARK-MASQ KUBE-MARK-DROP KUBE-POSTROUTING KUBE-IPTABLES-HINT; do
				$ipt -t $t -F $c 2>/dev/null && $ipt -t $t -X $c 2>/dev/null || true
			done
		done
	done
	iptables -D FORWARD -s "$POD_NET" ! -o "$BR" -j DROP 2>/dev/null || true
	iptables -D FORWARD -d "$POD_NET" ! -i "$BR" -j DROP 2>/dev/null || true
	for n in $(ip -o link show master "$BR" 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//'); do ip link del "$n" 2>/dev/null || true; done
	ip link del "$BR" 2>/dev/null || true
	# kubelet's cgroups, empty once the pods are gone (children first).
	find /sys/fs/cgroup -depth -type d -path '*/kubepods*' 2>/dev/null | while read -r c; do rmdir "$c" 2>/dev/null || true; done
	if [ -f "$S/sysctl" ]; then
		while IFS='=' read -r k v; do
			[ "$v" = absent ] || [ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || sysctl -qw "$k=$v" || true
		done <"$S/sysctl"
	fi
	restore_paths
	rm -rf "$K"
	say "torn down in $(( $(date +%s) - t0 ))s"
}

# ours matches what this cluster makes; other engineers share the host, so
# a difference that does not match is shown, not held against the run.
ours="$BR|$K|10\.232\.|10\.233\.|KUBE-|kubepods|cni-|/var/log/pods|/var/log/containers|/var/lib/cni|/run/containerd|/var/lib/kubelet|/etc/kubernetes|="

# leftovers compares the host with its state before up.
leftovers() {
	local d=$cache/host-after bad=0 f changed
	host_snapshot "$d"
	for f in mounts links iptables ip6tables sysctl paths cgroups netns; do
		changed=$(diff "$S/$f" "$d/$f" | grep '^[<>]' || true)
		[ -n "$changed" ] || continue
		if echo "$changed" | grep -qE "$ours"; then
			say "LEFT BEHIND ($f):"
			bad=1
		else
			say "changed meanwhile, not by this run ($f):"
		fi
		echo "$changed" | sed 's/^/    /'
	done
	for n in containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns; do
		if pgrep -f "^($B/)?$n( |$)" >/dev/null 2>&1 || pgrep -f "$K/" >/dev/null 2>&1; then
			say "LEFT BEHIND: a $n process or one using $K"
			bad=1
		fi
	done
	rm -rf "$d"
	return $bad
}

finish() {
	local rc=$?
	trap - EXIT INT TERM ERR
	down
	if leftovers; then
		say "host as before: no process, bridge, rule, mount or sysctl change left"
	else
		rc=1
	fi
	[ $rc = 0 ] && say "PASS in $(( $(date +%s) - t_start ))s" || say "FAILED (rc $rc)"
	exit $rc
}

# ---- the runs ----

request_mib() { awk '/requests:/{r=1} r && /memory:/{sub(/Mi/, "", $2); print $2; exit}' "$1/manifests/fleet.yaml"; }

cluster_view() { # name
	local phases cond
	phases=$(kubectl get pods -l "app.kubernetes.io/name=$1-fleet" -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | sort | uniq -c | xargs)
	cond=$(kubectl get job "$1-fleet" -o jsonpath='{.status.conditions[?(@.type=="Complete")].status}')
	say "cluster's view of $1: pods: $phases; Job Complete=$cond"
	[ "$phases" = "4 Succeeded" ] && [ "$cond" = True ] || die "the cluster does not see 4 Succeeded pods and a complete Job"
}

k8scheck() { go run ./tools/k8scheck "$@"; }

run_receive_only() {
	local o=$out/a
	say "(a) 4 shards x 500 receive-only clients, relay Deployment"
	"$replay" k8s run --images "$images" --relay --shards 4 --name rx --cpu 100m --relay-cpu 200m --keep --out "$o" -- \
		--clients 2000 --room-size 100 --receive-only --login-interval 2ms --duration 25s | tee "$o.answer.txt" || die "(a) replay k8s run failed"
	cluster_view rx
	# Receive-only: no stamps, so its percentiles are not checked here
	# (b's are).
	k8scheck shards "$o" --clients 2000 --per-load --request-mib "$(request_mib "$o")" | tee "$o.checks.txt" || die "(a) checks"
	kubectl delete --cascade=foreground -f "$o/manifests" >/dev/null
}

nn_flags=(--clients 80 --room-size 10 --loop=12s,48s --login-interval 20ms --duration 30s)

run_nn() {
	local o=$out/b
	say "(b) 4-shard N:N: ${nn_flags[*]}"
	"$replay" k8s run --images "$images" --relay --shards 4 --name nn --cpu 100m --relay-cpu 200m --out "$o" -- \
		"${nn_flags[@]}" | tee "$o.answer.txt" || die "(b) replay k8s run failed"
	[ -z "$(kubectl get all,configmap -l app.kubernetes.io/part-of=reprise -o name)" ] || die "(b) replay k8s run left objects behind"
	k8scheck shards "$o" --clients 80 --stamps --per-load --request-mib "$(request_mib "$o")" | tee "$o.checks.txt" || die "(b) checks"

	say "(b) the same N:N run as one process on the host (relay on a free port of 127.0.0.1)"
	local port rpid
	"$relay" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 >"$out/host-relay.log" 2>&1 &
	rpid=$!
	waitfor "grep -q '^listening tcp=' '$out/host-relay.log'" 20 || { kill $rpid 2>/dev/null || true; die "host relay did not listen (log: $out/host-relay.log)"; }
	port=$(sed -n 's/^listening tcp=127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$out/host-relay.log" | head -1)
	# The process that listens there is the one started here, no one else's.
	ss -ltnpH "sport = :$port" | grep -q "pid=$rpid," || { ss -ltnpH "sport = :$port" | sed 's/^/    /'; kill $rpid 2>/dev/null || true; die "127.0.0.1:$port is not held by the relay this script started (pid $rpid)"; }
	"$replay" --capture "$here/captures/vr-session.pcap" --target 127.0.0.1:$port "${nn_flags[@]}" \
		--summary "$out/host-one.json" >"$out/host-one.txt" 2>"$out/host-one.log" || { kill $rpid 2>/dev/null || true; die "host run failed (log: $out/host-one.log)"; }
	kill $rpid 2>/dev/null || true
	wait $rpid 2>/dev/null || true
	k8scheck agree "$o/merged.json" "$out/host-one.json" --within 1 | tee "$out/agree.txt" || die "(b) sharded and one-process runs disagree"
}

run_missing_image() {
	local o=$out/c
	say "(c) an image that is not there: the pod must be named with its reason"
	if "$replay" k8s run --image localhost/reprise-replay:no-such-tag --pull-policy Never --image-capture /captures/vr-session.pcap \
		--shards 2 --name bad --cpu 100m --start-timeout 60s --out "$o" -- --clients 2 --receive-only --duration 2s >"$o.txt" 2>&1; then
		die "(c) a run with no image succeeded"
	fi
	grep -E "shard [01] \(pod bad-fleet-[01]-[a-z0-9]+\) failed: ErrImageNeverPull" "$o.txt" | tail -1 | sed 's/^/    /'
	grep -qE "failed: ErrImageNeverPull" "$o.txt" || { cat "$o.txt"; die "(c) the failure does not name the pod and ErrImageNeverPull"; }
	[ -z "$(kubectl get all,configmap -l app.kubernetes.io/part-of=reprise -o name)" ] || die "(c) the failed run left objects behind"
}

# The driver here, the fleets on the cluster: capacity, then compare.
cap_flags=(--capture "$here/captures/vr-session.pcap" --loop=12s,48s --login-interval 20ms --start 20 --step 20 --max 60 --hold 8s
	--slo 'idle=off,fleet_idle=off,lag=off')

run_capacity() {
	local o=$out/d
	say "(d) replay capacity --k8s: 2 shard pods per level, relay Deployment; the report here"
	"$replay" capacity --k8s --images "$images" --relay --shards 2 --name cap "${cap_flags[@]}" --out "$o" \
		>"$o.answer.txt" 2>"$o.log" || { tail -20 "$o.log" | sed 's/^/    /'; die "(d) replay capacity --k8s failed (log: $o.log)"; }
	sed 's/^/    /' "$o.answer.txt" | tail -8
	[ -z "$(kubectl get all,configmap -l app.kubernetes.io/part-of=reprise -o name)" ] || die "(d) capacity left objects behind"
	k8scheck report "$o" --fleet "shard pods of a Kubernetes Job" | tee "$o.checks.txt" || die "(d) the report disagrees with its series"
	ls "$o"/k8s/cap-1/shard-*.log >/dev/null || die "(d) no shard logs on the host"
}

run_compare() {
	local o=$out/e
	say "(e) replay compare --k8s: N:N then 1:N, 2 shard pods each"
	"$replay" compare --k8s --images "$images" --relay --shards 2 --name cmp --capture "$here/captures/vr-session.pcap" \
		--clients 40 --senders 4 --loop=12s,48s --login-interval 20ms --duration 15s --slo 'idle=off,fleet_idle=off,lag=off' --out "$o" \
		>"$o.answer.txt" 2>"$o.log" || { tail -20 "$o.log" | sed 's/^/    /'; die "(e) replay compare --k8s failed (log: $o.log)"; }
	sed 's/^/    /' "$o.answer.txt" | tail -6
	[ -z "$(kubectl get all,configmap -l app.kubernetes.io/part-of=reprise -o name)" ] || die "(e) compare left objects behind"
	k8scheck report "$o" --fleet "shard pods of a Kubernetes Job" | tee "$o.checks.txt" || die "(e) the report disagrees with its series"
}

run_unschedulable() {
	local o=$out/f t0
	say "(f) a run that cannot fit the node: refused before anything is created"
	t0=$(date +%s)
	if "$replay" k8s run --images "$images" --relay --shards 4 --name big --out "$o" -- \
		--clients 4000000 --receive-only --duration 5s >"$o.txt" 2>&1; then
		die "(f) a run that cannot fit succeeded"
	fi
	grep -q "does not fit the cluster" "$o.txt" || { cat "$o.txt"; die "(f) the refusal does not give the numbers"; }
	sed 's/^/    /' "$o.txt" | tail -1
	[ $(( $(date +%s) - t0 )) -lt 30 ] || die "(f) the refusal took $(( $(date +%s) - t0 ))s"
	[ -z "$(kubectl get all,configmap -l app.kubernetes.io/part-of=reprise -o name)" ] || die "(f) the refused run created objects"
}

run_interrupt() {
	local o=$out/g pid rc=0
	say "(g) Ctrl-C of replay k8s run: it prints what the shards ran so far and exits 0"
	"$replay" k8s run --images "$images" --relay --shards 2 --name intr --cpu 100m --relay-cpu 200m --out "$o" -- \
		--clients 40 --room-size 10 --loop=12s,48s --login-interval 20ms --duration 120s >"$o.txt" 2>"$o.log" &
	pid=$!
	waitfor "[ \$(grep -c 'intr-fleet-.*: running' '$o.log') -ge 2 ]" 120 || { kill $pid 2>/dev/null || true; die "(g) the shards did not run (log: $o.log)"; }
	# Both shards past the start (k8s run holds them at the barrier until
	# every one answers) with all their logins in, as (h): not a fixed
	# wait, which a loaded host outlasts.
	waitfor "[ \$(kubectl logs -l app.kubernetes.io/name=intr-fleet --tail=-1 --prefix 2>/dev/null | grep 'logged in 20 /' | cut -d' ' -f1 | sort -u | wc -l) = 2 ]" 120 ||
		{ kill $pid 2>/dev/null || true; die "(g) the shards did not log their 20 clients in (log: $o.log)"; }
	kill -INT $pid
	wait $pid || rc=$?
	[ $rc = 0 ] || { tail -5 "$o.log" | sed 's/^/    /'; die "(g) Ctrl-C: exit $rc, want 0"; }
	grep -q "interrupted: 2 of 2 shards' summaries merged" "$o.log" || { tail -5 "$o.log" | sed 's/^/    /'; die "(g) Ctrl-C: the shards' summaries were not merged"; }
	grep -E "^logins succeeded +40$" "$o.txt" >/dev/null || { cat "$o.txt"; die "(g) Ctrl-C: the answer is not what ran (40 logins)"; }
	grep -E "^(logins succeeded|messages received) " "$o.txt" | sed 's/^/    /'
	[ -z "$(kubectl get all,configmap -l app.kubernetes.io/part-of=reprise -o name)" ] || die "(g) Ctrl-C left objects behind"
}

# (h) Ctrl-C of compare --k8s while its first fleet (no levels) runs.
run_compare_interrupt() {
	local o=$out/h pid rc=0 t0 took
	say "(h) Ctrl-C of replay compare --k8s in its first fleet (120 s, no levels): the pods stopped, their summaries read, the report written"
	"$replay" compare --k8s --images "$images" --relay --shards 2 --name intc --capture "$here/captures/vr-session.pcap" \
		--clients 40 --senders 4 --loop=12s,48s --login-interval 20ms --duration 120s --slo 'idle=off,fleet_idle=off,lag=off' --out "$o" \
		>"$o.answer.txt" 2>"$o.log" &
	pid=$!
	waitfor "[ \$(kubectl get pods -l app.kubernetes.io/name=intc-1-fleet --field-selector=status.phase=Running -o name | wc -l) = 2 ]" 180 ||
		{ kill $pid 2>/dev/null || true; die "(h) the first fleet's 2 pods did not run (log: $o.log)"; }
	# Both shards past their barrier with all their logins in (a progress
	# line of each pod says 20 logged in), not a fixed wait: the barrier's
	# start and the ramp take longer on a loaded host (29 of 40 were in
	# after a fixed 10 s at load 15).
	waitfor "[ \$(kubectl logs -l app.kubernetes.io/name=intc-1-fleet --tail=-1 --prefix 2>/dev/null | grep 'logged in 20 /' | cut -d' ' -f1 | sort -u | wc -l) = 2 ]" 120 ||
		{ kill $pid 2>/dev/null || true; die "(h) the first fleet's shards did not log their 20 clients in (log: $o.log)"; }
	t0=$(date +%s)
	kill -INT $pid
	wait $pid || rc=$?
	took=$(( $(date +%s) - t0 ))
	[ $rc = 0 ] || { tail -5 "$o.log" | sed 's/^/    /'; die "(h) Ctrl-C: exit $rc, want 0 (the report of what ran)"; }
	[ $took -lt 60 ] || die "(h) Ctrl-C took ${took}s: the fleet was not stopped (its --duration is 120 s)"
	grep -q "intc-1: stopping the shards" "$o.log" || { tail -5 "$o.log" | sed 's/^/    /'; die "(h) the shards were not stopped"; }
	grep -E "^compare: N:N #1 done: 40 logged in" "$o.log" | sed 's/^/    /'
	grep -qE "^compare: N:N #1 done: 40 logged in" "$o.log" || { tail -5 "$o.log" | sed 's/^/    /'; die "(h) the shards' summaries were not read (40 logins)"; }
	grep -q "interrupted before its duration ended" "$o/summary.json" || die "(h) the report does not say the run was interrupted"
	say "(h) ended ${took}s after Ctrl-C"
	[ -z "$(kubectl get all,configmap -l app.kubernetes.io/part-of=reprise -o name)" ] || die "(h) Ctrl-C left objects behind"
	k8scheck report "$o" --fleet "shard pods of a Kubernetes Job" | tee "$o.checks.txt" || die "(h) the report disagrees with its series"
}

main() {
	case ${1:-all} in
	all | up) ;;
	down)
		down
		leftovers && say "host as before"
		return ;;
	*) echo "usage: k8s-e2e.sh [all|up|down]"; exit 2 ;;
	esac
	[ -d "$K" ] && { say "a previous run's state is in $K: tearing it down first"; down; }
	rm -rf "$out"
	mkdir -p "$out"
	scripts/k8s-build.sh
	[ "${1:-all}" = up ] || check_port_refusal
	host_snapshot "$S"
	trap finish EXIT
	trap 'exit 130' INT TERM
	up
	if [ "${1:-all}" = up ]; then
		# Leave it up to try by hand (README, "Kubernetes").
		trap - EXIT INT TERM ERR
		say "cluster up: export KUBECONFIG=$KUBECONFIG PATH=$B:\$PATH; scripts/k8s-e2e.sh down when done"
		return
	fi
	run_receive_only
	run_nn
	run_missing_image
	run_unschedulable
	run_capacity
	run_compare
	run_interrupt
	run_compare_interrupt
}

main "$@"
