# reprise: record one client, replay it as a fleet, see what the relay holds.
GO        ?= go
FUZZTIME  ?= 10s
# staticcheck 2026.2.2 is module version v0.8.2
STATICCHECK_VERSION ?= v0.8.2
BIN       := bin

.PHONY: all build deps-demo deps-test deps-bench-fleet deps-bench-fidelity demo test check vet staticcheck race timing fuzz golden bench bench-relay relay-scale bench-compare bench-fleet bench-fidelity captures observe clean k8s-images k8s-e2e shard-scale

all: build

## build: relay, replay and vrclient without cgo (static, no C library malloc arenas: an address-space
## cap such as prlimit --as 2 GiB leaves them the room it says); record with it (libpcap for `record live`).
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/relay ./cmd/replay ./examples/vrclient
	$(GO) build -o $(BIN)/ ./cmd/record

## deps-demo, deps-test, deps-bench-fleet, deps-bench-fidelity: install the Debian packages (scripts/debian-packages) and
## go-installed programs (scripts/go-tools) the target needs when missing, as root; otherwise print the command and exit 2.
deps-demo deps-test deps-bench-fleet deps-bench-fidelity: deps-%:
	./scripts/deps.sh $*

## demo: the main job on the bundled capture against a relay child process.
demo: deps-demo
	$(MAKE) build
	./scripts/demo.sh

## test: vet, staticcheck, race tests, and every fuzz target for $(FUZZTIME).
test: deps-test
	$(MAKE) check fuzz

check: vet staticcheck race timing

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

race: build
	$(GO) test -race -count=1 -timeout 25m ./...

## timing: the tests whose latency figures the race detector would distort, without it.
timing:
	$(GO) test -count=1 -timeout 2m -run 'TestFlooderHurtsOnlyItself' ./cmd/relay

fuzz:
	./scripts/fuzz-all.sh $(FUZZTIME)

## golden: rewrite golden files after an intended encoding change.
golden:
	$(GO) test ./internal/wire -run Golden -update
	$(GO) test ./internal/report -run Golden -update
	$(GO) test ./internal/report -run ReportInChromium -update # docs/report-example.png
	$(GO) test ./cmd/replay -run InspectProfileGolden -update

## captures: re-record captures/*.pcap with `record live` on lo (root; see captures/README.md).
captures: build
	./captures/record.sh

bench:
	$(GO) test -run XXX -bench . -benchmem ./internal/...

## relay-scale: the relay's memory at scale, as root: 16,000 members that never read in a 1 GiB cgroup v1
## memory group, 8,000 under prlimit --as 2 GiB, RSS back after (cmd/relay/memory_test.go; minutes).
relay-scale:
	RELAY_SCALE=1 $(GO) test -count=1 -timeout 20m -run 'TestScale' -v ./cmd/relay

## bench-relay: load benchmark of the relay binary (tools/relaybench): 512 clients in 16 rooms of 32,
## 200-byte othercast at 72 Hz for 30 s, then 10,000 idle connections. RELAYBENCH_FLAGS to change.
RELAYBENCH_FLAGS ?=
bench-relay: build
	$(GO) run ./tools/relaybench --relay $(BIN)/relay --mode fanout $(RELAYBENCH_FLAGS)
	$(GO) run ./tools/relaybench --relay $(BIN)/relay --mode idle

## bench-fleet: the fleet against the relay, each its own process on 127.0.0.1: the fleet's CPU per
## received message over the relay's per delivery (N:N 8x32 and 16x32 over TCP, 3 reps; target <= 0.5)
## and its RSS per idle receive-only client (10,000 over TCP, UDP and WebSocket; target <= 8 KiB); then,
## in bench/, the fleet beside k6 against a WebSocket room server (bench/cmd/wsvsk6; k6 skipped when not
## installed: make deps-bench-fleet installs it). docs/performance.md.
bench-fleet: build
	cd bench && $(GO) build -o ../$(BIN)/wsroom ./cmd/wsroom
	./scripts/fleet-ratio.sh
	./scripts/fleet-idle.sh
	cd bench && $(GO) run ./cmd/wsvsk6 --bin ../$(BIN) --wsroom ../$(BIN)/wsroom --idle-clients 1000

## bench-fidelity: timing fidelity on the wire: tcpdump on lo while the fleet replays the bundled
## captures (8x32, 2x32 and 1x8 N:N, TCP and UDP, 3 reps), each client's gaps between frames against the
## recorded gaps (tools/fidelity). Root and tcpdump (deps-bench-fidelity). BINS="old=DIR new=bin" for A/B.
bench-fidelity: deps-bench-fidelity build
	./scripts/timing-fidelity.sh

## bench-compare: the relay (over TCP and over UDP), the UDP floor and nats-server side by side (bench/, its own module; docs/performance.md).
BENCH_COMPARE_FLAGS ?=
bench-compare:
	cd bench && $(GO) run ./cmd/benchcompare $(BENCH_COMPARE_FLAGS)

## observe: Prometheus on 127.0.0.1:9090 (and Grafana on :3000 if installed) with the project's config and dashboards.
observe:
	./scripts/observe.sh

## k8s-images: static replay and relay (also as $(BIN)/replay and $(BIN)/relay, the README's commands), and their
## OCI image tarballs in $(BIN)/images (no Docker; README "Kubernetes").
k8s-images:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/static/ ./cmd/replay ./cmd/relay
	cp $(BIN)/static/replay $(BIN)/static/relay $(BIN)/
	$(BIN)/static/replay k8s image --replay $(BIN)/static/replay --relay $(BIN)/static/relay --capture captures/vr-session.pcap --out $(BIN)/images

## k8s-e2e: opt-in, root: a one-node Kubernetes on this machine (binaries built once into
## /var/cache/reprise-k8s, ~20 min cold), the sharded runs on it, checks, then everything torn down.
k8s-e2e: k8s-images
	./scripts/k8s-e2e.sh

## shard-scale: opt-in: 256 shard processes meet one barrier coordinator over TCP at the start and at 5 levels,
## then 256 summaries are merged; prints the figures docs/scaling.md quotes (lateness, coordinator CPU/RSS, merge).
shard-scale:
	$(GO) run ./tools/shardscale -n 256 -levels 5

clean:
	rm -rf $(BIN) out
