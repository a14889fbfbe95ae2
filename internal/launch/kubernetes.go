package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reprise-harness/reprise/internal/barrier"
	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/k8s"
	"github.com/reprise-harness/reprise/internal/report"
)

// Kubernetes runs each fleet as an Indexed Job of shard pods (internal/k8s
// renders it), from this machine through the user's kubectl. Shard 0's pod
// serves the barrier and holds the start; this process controls it over a
// `kubectl port-forward` (barrier.Remote): it starts the fleet after its
// baseline and decides at each level, as for local shards. Every shard's
// /metrics is scraped through one `kubectl proxy` (the API server's proxy
// to the pod), so the cluster's network need not reach this machine nor
// this machine the pods. Each shard's summary is the last line of its log;
// the logs, the summaries and the manifests are kept in Dir. Stop (or the
// run's context ending) halts the shards at their levels and, a fleet
// with no levels at once, suspends the Job: Kubernetes sends each pod
// SIGTERM, on which replay writes its summary, read from the logs
// followed until then. A fleet's objects are deleted when it ends, fails
// or is interrupted (unless Keep). OpenKubernetes makes one, with what a
// run creates besides its fleets (the capture's ConfigMap, the relay, the
// proxy); Close deletes that.
type Kubernetes struct {
	Kubectl   *k8s.Kubectl
	Namespace string // resolved (Kubectl.CurrentNamespace)
	// Proxy is the host:port of a `kubectl proxy` (Kubectl.Proxy).
	Proxy string
	// Params are the manifests' parameters: Name (each fleet's Job is
	// <Name>-<n>), Image, PullPolicy, Shards, the capture's source.
	Params k8s.Params
	// CPUMilli is each shard's CPU request (0: as k8s.Plan gives).
	CPUMilli int64
	// Args gives a fleet's replay flags in its pods (cmd/replay builds
	// them next to the flags that define them): the manifests add the
	// capture, shard, barrier, metrics and summary flags.
	Args func(fleet.Config) []string
	// Dir receives each fleet's manifests, shard logs and summaries.
	Dir string
	// StartTimeout bounds the wait for every pod to run and answer on
	// its metrics (0: 3 min). A pod that cannot be scheduled or cannot
	// start (no image) ends the wait at once, with the cluster's reason.
	StartTimeout time.Duration
	// Keep leaves every object in the cluster at the end, to look at.
	Keep bool
	// Single is a runner of one fleet, as `replay k8s render` names it:
	// its Job is <Name>-fleet, its manifest in Dir/manifests with the
	// run's others, its logs and summaries in Dir (else fleet n is the
	// Job <Name>-n-fleet, its files in Dir/<Name>-n).
	Single bool

	proxy *k8s.Background // OpenKubernetes's, stopped by Close

	mu  sync.Mutex
	seq int
}

// Describe implements Runner.
func (k *Kubernetes) Describe() string {
	return fmt.Sprintf("%d shard pods of a Kubernetes Job (namespace %s)", k.Params.Shards, k.Namespace)
}

// barrierLead is the time between the start a shard 0 sends and the
// fleet's clock starting, for a fleet on Kubernetes.
const barrierLead = 3 * time.Second

// pollEvery is how often the pods are listed.
const pollEvery = time.Second

// Prepare implements Runner: it checks that the fleet fits the nodes
// (read now), creates the Job, and returns once every shard runs and its
// barrier is under this process's control.
func (k *Kubernetes) Prepare(ctx context.Context, cfg fleet.Config) (Fleet, error) {
	n := k.Params.Shards
	if n < 1 || k.Args == nil || k.Kubectl == nil {
		return nil, fmt.Errorf("kubernetes: %d shards, kubectl and args: want at least 1 shard and both", n)
	}
	k.mu.Lock()
	k.seq++
	seq := k.seq
	k.mu.Unlock()
	name, dir, mdir := fmt.Sprintf("%s-%d", k.Params.Name, seq), "", ""
	switch {
	case k.Single && seq > 1:
		return nil, fmt.Errorf("kubernetes: a runner of one fleet prepares one")
	case k.Single:
		name, dir, mdir = k.Params.Name, k.Dir, k.manifestDir()
	default:
		dir = filepath.Join(k.Dir, name)
		mdir = dir
	}
	rooms, err := k.Kubectl.Rooms(ctx)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: the nodes' room: %w", err)
	}
	per := (cfg.Clients + n - 1) / n
	fit, err := k8s.Plan(k8s.Want{Shards: n, ClientsPerShard: per, CPUMilli: k.CPUMilli, MemMiB: shardMemMiB(k.Params, per)}, rooms)
	if err != nil {
		return nil, err
	}
	p := k.Params
	p.Name, p.Relay, p.Clients = name, false, cfg.Clients
	p.CPU, p.MemoryMiB = fmt.Sprintf("%dm", fit.CPUMilli), fit.MemMiB
	if p.CaptureConfigMap == "" {
		p.CaptureConfigMap = k.Params.Name + "-capture"
	}
	// The lead leaves room for every shard's /metrics to come up and for
	// the driver's baseline through the API server's proxy.
	p.RunArgs = append(k.Args(cfg), "--barrier-hold", "--barrier-lead", barrierLead.String())
	if len(cfg.Levels) > 0 {
		p.RunArgs = append(p.RunArgs, "--levels", intList(cfg.Levels))
	}
	files, err := k8s.Render(p)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	if err := k8s.Write(files[:1], mdir, nil); err != nil {
		return nil, err
	}
	h := &kfleet{k: k, name: name, dir: dir, manifest: filepath.Join(mdir, "fleet.yaml"), n: n, list: cfg.Levels, seen: map[string]k8s.PodState{},
		levels: make(chan Level), failed: make(chan struct{}), ended: make(chan struct{}), done: make(chan struct{}),
		stopping: make(chan struct{}), stopped: make(chan struct{}), logs: make([][]byte, n)}
	h.life, h.endLife = context.WithCancel(context.Background())
	k.logf("%s: %d shards × %d clients, each %dm CPU and %d MiB requested", name, n, per, fit.CPUMilli, fit.MemMiB)
	if err := k.Kubectl.Create(ctx, h.manifest); err != nil {
		h.close()
		return nil, err
	}
	if err := h.prepare(ctx); err != nil {
		h.close()
		return nil, err
	}
	// Ctrl-C stops the shards as Stop does: each writes what it ran.
	h.unlink = context.AfterFunc(ctx, func() { h.interruptNow("interrupted") })
	return h, nil
}

func (k *Kubernetes) logf(format string, a ...any) {
	if k.Kubectl.Logf != nil {
		k.Kubectl.Logf(format, a...)
	}
}

func (k *Kubernetes) startTimeout() time.Duration {
	if k.StartTimeout <= 0 {
		return 3 * time.Minute
	}
	return k.StartTimeout
}

// kfleet is one fleet's Job. watch (one goroutine from prepare until
// every pod ended, the fleet is stopped or closed) owns pods and the first
// failure; forward hands the remote barrier's levels to the driver;
// suspend (from Stop) stops the pods and follows their logs.
type kfleet struct {
	k        *Kubernetes
	name     string
	dir      string
	manifest string
	n        int
	list     []int

	pods    []string // by index, set before watch starts
	targets []report.Target
	pf      *k8s.Background
	remote  *barrier.Remote
	levels  chan Level

	failOnce sync.Once
	failErr  error
	failed   chan struct{} // closed at the first failure (failErr set)
	ended    chan struct{} // closed by watch when every pod ended
	done     chan struct{} // closed by close: the watcher and forwarder stop
	bg       sync.WaitGroup
	closeMu  sync.Once

	life      context.Context // ends at close: bounds suspend's kubectl calls
	endLife   context.CancelFunc
	unlink    func() bool // the run's context no longer interrupts
	stopOnce  sync.Once
	interrupt *time.Timer   // set by Stop: suspends the Job unless every shard stopped at its level
	stopping  chan struct{} // closed when the Job is being suspended (watch stops judging)
	stopped   chan struct{} // closed by suspend once every followed log ended
	logs      [][]byte      // by index, set by suspend before stopped
	suspOnce  sync.Once
	stopCause string // why the Job was suspended ("interrupted", "stopped"), set before stopping is closed

	// seen is each pod's state as last logged, and lastStatus when the
	// last count of states was: look's (prepare's, then watch's).
	seen       map[string]k8s.PodState
	lastStatus time.Time
	started    time.Time // set by Start
}

func (h *kfleet) fail(err error) {
	h.failOnce.Do(func() {
		h.failErr = err
		close(h.failed)
	})
}

// prepare waits for every pod to run, takes the barrier, and waits for
// every shard's /metrics through the API server's proxy: a shard serves
// it while it waits at the barrier, so the driver's baseline, read before
// Start, has every shard's counters at zero.
func (h *kfleet) prepare(ctx context.Context) error {
	k := h.k
	end := time.Now().Add(k.startTimeout()) // of the whole wait
	deadline := end
	app := h.name + "-fleet"
	h.lastStatus = time.Now()
	for {
		pods, err := k.Kubectl.Pods(ctx, app)
		if err != nil {
			return err
		}
		byIndex, running, err := h.look(ctx, pods)
		if err != nil {
			return err
		}
		if running == h.n {
			h.pods = byIndex
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every shard of %s runs within --start-timeout %v: %d of %d (kubectl describe job %s)", h.name, k.startTimeout(), running, h.n, app)
		}
		if err := sleepCtx(ctx, pollEvery); err != nil {
			return err
		}
	}
	for _, pod := range h.pods {
		h.targets = append(h.targets, report.Target{Role: report.RoleFleet,
			URL: k8s.ProxyURL(k.Proxy, k.Namespace, "pods", pod, strconv.Itoa(k8s.MetricsPort), "/metrics")})
	}
	h.bg.Go(h.watch)
	// A port-forward made before shard 0's coordinator listens may end
	// when its first connection is refused: a new one each try.
	deadline = time.Now().Add(time.Minute)
	for {
		pf, err := k.Kubectl.PortForward(ctx, h.pods[0], k8s.BarrierPort)
		if err != nil {
			return fmt.Errorf("the barrier on %s: %w", h.pods[0], err)
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h.remote, err = barrier.Dial(dctx, pf.Addr, h.n)
		cancel()
		if err == nil {
			h.pf = pf
			break
		}
		pf.Stop()
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("the barrier on %s: %w", h.pods[0], err)
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
	}
	h.bg.Go(h.forward)
	if err := waitMetrics(ctx, h.targets, max(time.Until(end), 30*time.Second), h.failed); err != nil {
		return h.why(err)
	}
	return nil
}

// why is err with the fleet's first failure, when there was one.
func (h *kfleet) why(err error) error {
	select {
	case <-h.failed:
		return errors.Join(err, h.failErr)
	default:
		return err
	}
}

// look reads the pods by index: how many run (or ran), and the first
// failure, with the cluster's reason (and the end of the failed pod's
// log). A pod the scheduler cannot place fails the run at once: waiting
// would not change the nodes. It logs each shard's changes of state and,
// every statusEvery, how many are in each.
func (h *kfleet) look(ctx context.Context, pods []k8s.Pod) ([]string, int, error) {
	byIndex := make([]string, h.n)
	var n [4]int
	for _, p := range pods {
		i := p.CompletionIndex()
		if i < 0 || i >= h.n {
			continue
		}
		byIndex[i] = p.Metadata.Name
		st, reason := p.State()
		n[st]++
		if old, ok := h.seen[p.Metadata.Name]; !ok || old != st {
			h.seen[p.Metadata.Name] = st
			h.k.logf("shard %d/%d %s: %s", i, h.n, p.Metadata.Name, st)
		}
		switch {
		case st == k8s.PodFailed:
			h.logTail(ctx, p.Metadata.Name)
			return nil, 0, fmt.Errorf("shard %d (pod %s) failed: %s", i, p.Metadata.Name, reason)
		case st == k8s.PodStarting && strings.HasPrefix(reason, "Unschedulable"):
			return nil, 0, fmt.Errorf("shard %d (pod %s) cannot be scheduled: %s", i, p.Metadata.Name, reason)
		}
	}
	if time.Since(h.lastStatus) >= statusEvery {
		h.lastStatus = time.Now()
		h.k.logf("%s: %d starting, %d running, %d succeeded of %d shards", h.name, n[k8s.PodStarting], n[k8s.PodRunning], n[k8s.PodSucceeded], h.n)
	}
	return byIndex, n[k8s.PodRunning] + n[k8s.PodSucceeded], nil
}

// statusEvery is how often look counts the shards' states in the log.
const statusEvery = 10 * time.Second

// logTail shows the end of a failed pod's log.
func (h *kfleet) logTail(ctx context.Context, pod string) {
	b, err := h.k.Kubectl.Run(ctx, "logs", "--tail=20", pod)
	if err != nil || len(b) == 0 {
		return
	}
	h.k.logf("the end of %s's log:\n%s", pod, bytes.TrimRight(b, "\n"))
}

// watch lists the pods until every one ended (ended) or one failed, or
// the Job is being suspended (the pods then end as suspend sees).
func (h *kfleet) watch() {
	app := h.name + "-fleet"
	for {
		select {
		case <-h.done:
			return
		case <-h.stopping:
			return
		default:
		}
		pods, err := h.k.Kubectl.Pods(h.life, app)
		if err != nil {
			select {
			case <-h.stopping:
			case <-h.done:
			default:
				h.fail(err)
			}
			return
		}
		if _, _, err := h.look(h.life, pods); err != nil {
			h.fail(err)
			return
		}
		succeeded := 0
		for _, p := range pods {
			if st, _ := p.State(); st == k8s.PodSucceeded {
				succeeded++
			}
		}
		if succeeded == h.n {
			close(h.ended)
			return
		}
		t := time.NewTimer(pollEvery)
		select {
		case <-h.done:
			t.Stop()
			return
		case <-h.stopping:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// forward hands each level every shard waits at to the driver; levels
// is closed when the barrier's connection ends (shard 0 ended) or the
// fleet is closed.
func (h *kfleet) forward() {
	defer close(h.levels)
	for {
		select {
		case a, ok := <-h.remote.Levels():
			if !ok {
				return
			}
			select {
			case h.levels <- Level{Index: levelIndex(h.list, a), Attempts: a, At: time.Now()}:
			case <-h.failed:
				return
			case <-h.done:
				return
			}
		case <-h.failed:
			return
		case <-h.done:
			return
		}
	}
}

func (h *kfleet) Targets() []report.Target { return h.targets }

func (h *kfleet) Start(ctx context.Context) (time.Time, error) {
	h.started = time.Now()
	if err := h.remote.Begin(); err != nil {
		return time.Time{}, fmt.Errorf("the barrier on %s: %w", h.pods[0], err)
	}
	select {
	case <-h.remote.Started():
		return h.remote.Start(), nil
	case <-h.remote.Done():
		return time.Time{}, h.remote.Err()
	case <-h.failed:
		return time.Time{}, h.failErr
	case <-ctx.Done():
		return time.Time{}, context.Cause(ctx)
	}
}

func (h *kfleet) Levels() <-chan Level { return h.levels }

func (h *kfleet) Resume(l Level) { h.remote.Resume(l.Attempts) }

// Stop halts the shards at their next level (now, for those waiting at
// one). Shards still running a while later (between levels), or at once
// a fleet with no levels, are stopped by suspending the Job: each gets
// SIGTERM and writes its summary, as on Ctrl-C.
func (h *kfleet) Stop() {
	if h.remote != nil {
		h.remote.Halt()
	}
	grace := stopAtLevelGrace
	if len(h.list) == 0 {
		grace = 0 // no level to stop at
	}
	h.stopOnce.Do(func() { h.interrupt = time.AfterFunc(grace, func() { h.interruptNow("stopped") }) })
}

// interruptNow suspends the Job, once, unless the fleet was closed; why
// says so in the log ("interrupted", "stopped").
func (h *kfleet) interruptNow(why string) {
	h.suspOnce.Do(func() {
		select {
		case <-h.done:
			return
		default:
		}
		h.stopCause = why
		close(h.stopping)
		h.bg.Go(h.suspend)
	})
}

// suspend follows every shard's log, then suspends the Job (Kubernetes
// deletes its running pods with their grace period: SIGTERM; a pod that
// already ended keeps its log), and keeps each log once its stream ends.
func (h *kfleet) suspend() {
	defer close(h.stopped)
	ctx, cancel := context.WithTimeout(h.life, stopGrace+time.Minute)
	defer cancel()
	h.k.logf("%s: stopping the shards (the Job suspended: SIGTERM); each writes what it ran so far", h.name)
	var wg sync.WaitGroup
	for i, pod := range h.pods {
		wg.Go(func() { h.logs[i], _ = h.k.Kubectl.Run(ctx, "logs", "-f", pod) })
	}
	// The streams attach before the pods are told to stop.
	sleepCtx(ctx, time.Second)
	if _, err := h.k.Kubectl.Run(ctx, "patch", "job", h.name+"-fleet", "--type=merge", "-p", `{"spec":{"suspend":true}}`); err != nil {
		h.k.logf("%s: %v", h.name, err)
	}
	wg.Wait()
}

// Wait waits until every pod ended (or was stopped), reads each one's
// summary from its log (kept in dir), merges them and deletes the
// fleet's objects.
func (h *kfleet) Wait() (fleet.Summary, error) {
	defer h.close()
	select {
	case <-h.ended:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := h.k.Kubectl.Run(ctx, "wait", "--for=condition=complete", "--timeout=60s", "job/"+h.name+"-fleet"); err != nil {
			return fleet.Summary{}, fmt.Errorf("every shard of %s succeeded but its Job is not complete: %w", h.name, err)
		}
		h.k.logf("job %s-fleet complete (%v)", h.name, time.Since(h.started).Round(time.Second))
		logs := make([][]byte, h.n)
		for i, pod := range h.pods {
			b, err := h.k.Kubectl.Run(ctx, "logs", pod)
			if err != nil {
				return fleet.Summary{}, fmt.Errorf("shard %d log: %w", i, err)
			}
			logs[i] = b
		}
		return h.merge(logs, false)
	case <-h.stopped:
		return h.merge(h.logs, true)
	case <-h.failed:
		return fleet.Summary{}, h.failErr
	}
}

// merge keeps each shard's log and summary in dir and merges the
// summaries. Every shard must have written one, but for a fleet stopped
// by suspending its Job: a shard killed before it could is named and
// left out, and only a fleet of which none wrote one fails.
func (h *kfleet) merge(logs [][]byte, suspended bool) (fleet.Summary, error) {
	sums := make([]fleet.Summary, 0, h.n)
	for i, b := range logs {
		if suspended && len(b) == 0 {
			h.k.logf("shard %d: no log: not running when %s", i, h.stopCause)
			continue
		}
		if err := os.WriteFile(filepath.Join(h.dir, fmt.Sprintf("shard-%d.log", i)), b, 0o644); err != nil {
			return fleet.Summary{}, fmt.Errorf("kubernetes: %w", err)
		}
		s, err := SummaryFromLog(b)
		if err == nil {
			err = writeJSON(filepath.Join(h.dir, fmt.Sprintf("shard-%d.json", i)), s.WriteJSON)
		}
		if err != nil {
			err = fmt.Errorf("shard %d (pod %s): %w", i, h.pods[i], err)
			if !suspended {
				return fleet.Summary{}, err
			}
			h.k.logf("%v", err)
			continue
		}
		sums = append(sums, s)
	}
	if suspended {
		if len(sums) == 0 {
			return fleet.Summary{}, fmt.Errorf("%s before any shard of %s wrote a summary (logs in %s)", h.stopCause, h.name, h.dir)
		}
		h.k.logf("%s: %s: %d of %d shards' summaries merged", h.name, h.stopCause, len(sums), h.n)
	}
	return fleet.Merge(sums)
}

// writeJSON writes a file with write.
func writeJSON(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (h *kfleet) Close() { h.close() }

// close stops the watcher, the barrier's control and its port-forward,
// and deletes the Job (waiting until its pods are gone).
func (h *kfleet) close() {
	h.closeMu.Do(func() {
		if h.unlink != nil {
			h.unlink()
		}
		h.stopOnce.Do(func() {}) // no interrupt timer from now on
		if h.interrupt != nil {
			h.interrupt.Stop()
		}
		h.suspOnce.Do(func() {}) // nor a suspension
		close(h.done)
		h.endLife()
		if h.remote != nil {
			h.remote.Close()
		}
		h.bg.Wait()
		h.pf.Stop()
		if h.k.Keep {
			return
		}
		if err := h.k.Kubectl.Delete(context.Background(), h.manifest); err != nil {
			h.k.logf("%s: %v", h.name, err)
		}
	})
}

// SummaryFromLog is the summary a shard wrote as the last JSON line of
// its log (--summary -).
func SummaryFromLog(b []byte) (fleet.Summary, error) {
	lines := bytes.Split(b, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if !bytes.HasPrefix(l, []byte(`{"clients_requested"`)) {
			continue
		}
		var s fleet.Summary
		if err := json.Unmarshal(l, &s); err == nil {
			return s, nil
		}
	}
	return fleet.Summary{}, errors.New("its log holds no summary line")
}

// intList is ns as a comma-separated list.
func intList(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
