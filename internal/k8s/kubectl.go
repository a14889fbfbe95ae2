package k8s

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Kubectl drives a cluster through the user's kubectl rather than
// client-go: the user's kubectl already knows their cluster (kubeconfig
// contexts, exec credential plugins for EKS/GKE/AKS, proxies), its version
// skew policy is the cluster's, and client-go would add tens of MB to the
// binary and a second copy of the Kubernetes module graph to pin. What a
// typed watch would give is a poll of `kubectl get pods -o json` once a
// second: a run lasts minutes, and a second of latency in noticing a pod
// costs nothing.
type Kubectl struct {
	Program   string // "kubectl" when empty
	Namespace string // the context's when empty
	// Logf receives progress lines ("created fleet.yaml"); nil: none.
	Logf func(format string, a ...any)

	mu      sync.Mutex
	created []string // manifests created, deleted in reverse
}

func (k *Kubectl) program() string {
	if k.Program == "" {
		return "kubectl"
	}
	return k.Program
}

func (k *Kubectl) logf(format string, a ...any) {
	if k.Logf != nil {
		k.Logf(format, a...)
	}
}

func (k *Kubectl) args(args []string) []string {
	if k.Namespace != "" {
		return append([]string{"--namespace", k.Namespace}, args...)
	}
	return args
}

// Run runs kubectl; its error carries kubectl's own message, or the
// context's cause when ctx ended.
func (k *Kubectl) Run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, k.program(), k.args(args)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ctx.Err() != nil {
			return out, context.Cause(ctx)
		}
		if msg == "" {
			return out, fmt.Errorf("%s %s: %w", k.program(), args[0], err)
		}
		return out, fmt.Errorf("%s %s: %s", k.program(), args[0], msg)
	}
	return out, nil
}

// CurrentNamespace is Namespace, or the current context's, or "default".
func (k *Kubectl) CurrentNamespace(ctx context.Context) (string, error) {
	if k.Namespace != "" {
		return k.Namespace, nil
	}
	b, err := k.Run(ctx, "config", "view", "--minify", "-o", "jsonpath={..namespace}")
	if err != nil {
		return "", err
	}
	return or(strings.TrimSpace(string(b)), "default"), nil
}

// Create creates the objects of a manifest file; Cleanup deletes them.
func (k *Kubectl) Create(ctx context.Context, path string) error {
	if _, err := k.Run(ctx, "create", "-f", path); err != nil {
		return err
	}
	k.mu.Lock()
	k.created = append(k.created, path)
	k.mu.Unlock()
	k.logf("created %s", filepath.Base(path))
	return nil
}

// Delete deletes the objects of one created manifest now, waiting until
// its pods are gone.
func (k *Kubectl) Delete(ctx context.Context, path string) error {
	k.mu.Lock()
	i := -1
	for j, p := range k.created {
		if p == path {
			i = j
		}
	}
	if i >= 0 {
		k.created = append(k.created[:i:i], k.created[i+1:]...)
	}
	k.mu.Unlock()
	return k.delete(ctx, path)
}

// deleteTimeout bounds a clean-up, which runs even after ctx ended.
const deleteTimeout = 2 * time.Minute

func (k *Kubectl) delete(ctx context.Context, path string) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	if _, err := k.Run(dctx, "delete", "--ignore-not-found", "--cascade=foreground", "--wait=true", "-f", path); err != nil {
		return fmt.Errorf("clean up: %w", err)
	}
	return nil
}

// Created are the manifests created and not deleted yet.
func (k *Kubectl) Created() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.created...)
}

// Cleanup deletes what was created, in reverse, waiting until the pods
// are gone, even when ctx was cancelled (Ctrl-C).
func (k *Kubectl) Cleanup(ctx context.Context) error {
	k.mu.Lock()
	created := k.created
	k.created = nil
	k.mu.Unlock()
	var errs []error
	for i := len(created) - 1; i >= 0; i-- {
		if err := k.delete(ctx, created[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(created) > 0 && len(errs) == 0 {
		k.logf("deleted everything it created")
	}
	return errors.Join(errs...)
}

// Pods lists the pods with the label app.kubernetes.io/name=app.
func (k *Kubectl) Pods(ctx context.Context, app string) ([]Pod, error) {
	b, err := k.Run(ctx, "get", "pods", "-l", "app.kubernetes.io/name="+app, "-o", "json")
	if err != nil {
		return nil, err
	}
	return DecodePods(b)
}

// Background is a kubectl that keeps running (proxy, port-forward) until
// Stop; Addr is the local host:port it printed.
type Background struct {
	Addr   string
	cmd    *exec.Cmd
	waited chan struct{}
}

var (
	proxyLine   = regexp.MustCompile(`Starting to serve on (127\.0\.0\.1:\d+)`)
	forwardLine = regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) ->`)
)

// Proxy starts `kubectl proxy` on a free loopback port: every pod's and
// service's HTTP port is then reachable from this machine through the
// API server (ProxyURL), whatever the cluster's network.
func (k *Kubectl) Proxy(ctx context.Context) (*Background, error) {
	return k.background(ctx, proxyLine, "proxy", "--port=0", "--address=127.0.0.1")
}

// PortForward forwards a free loopback port to a pod's port (for TCP that
// is not HTTP: the barrier's controller).
func (k *Kubectl) PortForward(ctx context.Context, pod string, port int) (*Background, error) {
	return k.background(ctx, forwardLine, k.args([]string{"port-forward", "--address=127.0.0.1", "pod/" + pod, fmt.Sprintf(":%d", port)})...)
}

// background starts kubectl with args (the namespace already in them)
// and waits for the line naming its local address.
func (k *Kubectl) background(ctx context.Context, addrLine *regexp.Regexp, args ...string) (*Background, error) {
	// Not CommandContext: it outlives Prepare's ctx; Stop ends it.
	cmd := exec.Command(k.program(), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", k.program(), args[0], err)
	}
	b := &Background{cmd: cmd, waited: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		defer close(b.waited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := addrLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case b.Addr = <-found:
		return b, nil
	case <-b.waited:
		return nil, fmt.Errorf("%s %s exited: %s", k.program(), args[0], strings.TrimSpace(stderr.String()))
	case <-t.C:
		b.Stop()
		return nil, fmt.Errorf("%s %s: no local address within 30s", k.program(), args[0])
	case <-ctx.Done():
		b.Stop()
		return nil, context.Cause(ctx)
	}
}

// Done is closed when the kubectl ended.
func (b *Background) Done() <-chan struct{} { return b.waited }

// Stop ends the kubectl and waits for it.
func (b *Background) Stop() {
	if b == nil || b.cmd.Process == nil {
		return
	}
	b.cmd.Process.Kill()
	<-b.waited
}

// ProxyURL is the URL of path on a pod's or a service's port through a
// kubectl proxy at addr: kind "pods" or "services".
func ProxyURL(addr, namespace, kind, name, port, path string) string {
	return fmt.Sprintf("http://%s/api/v1/namespaces/%s/%s/%s:%s/proxy%s", addr, namespace, kind, name, port, path)
}

// WaitReady waits until a pod of app (label app.kubernetes.io/name) is
// ready, for at most timeout; a pod that failed or cannot be scheduled
// ends the wait at once, with the cluster's reason.
func (k *Kubectl) WaitReady(ctx context.Context, app string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pods, err := k.Pods(ctx, app)
		if err != nil {
			return err
		}
		var why string
		for _, p := range pods {
			st, reason := p.State()
			switch {
			case st == PodRunning && p.Ready():
				k.logf("%s ready", p.Metadata.Name)
				return nil
			case st == PodFailed || st == PodSucceeded:
				return fmt.Errorf("pod %s %s: %s", p.Metadata.Name, st, or(reason, "it exited"))
			case strings.HasPrefix(reason, "Unschedulable"):
				return fmt.Errorf("pod %s cannot be scheduled: %s", p.Metadata.Name, reason)
			}
			why = fmt.Sprintf("pod %s: %s", p.Metadata.Name, or(reason, "not ready"))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not ready within %v: %s", app, timeout, or(why, "no pod was created (kubectl describe deployment "+app+")"))
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}
