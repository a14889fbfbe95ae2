package k8s

import (
	"bytes"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/reprise-harness/reprise/internal/testproc"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes from the templates")

// objects are the decoded manifests of one rendering.
type objects struct {
	jobs     []batchv1.Job
	services []corev1.Service
	deploys  []appsv1.Deployment
	configs  []corev1.ConfigMap
}

// decode splits YAML streams into documents and decodes each strictly
// (an unknown or duplicated field is an error) into its API type.
func decode(t *testing.T, files []File) objects {
	t.Helper()
	var o objects
	for _, f := range files {
		for i, doc := range strings.Split(string(f.Data), "\n---\n") {
			var tm struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s document %d: %v", f.Name, i, err)
			}
			gv, err := schema.ParseGroupVersion(tm.APIVersion)
			if err != nil {
				t.Fatalf("%s document %d: apiVersion %q: %v", f.Name, i, tm.APIVersion, err)
			}
			strict := func(into any) {
				if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
					t.Fatalf("%s document %d (%s): %v", f.Name, i, tm.Kind, err)
				}
			}
			switch gvk := gv.WithKind(tm.Kind); gvk {
			case batchv1.SchemeGroupVersion.WithKind("Job"):
				var j batchv1.Job
				strict(&j)
				o.jobs = append(o.jobs, j)
			case corev1.SchemeGroupVersion.WithKind("Service"):
				var s corev1.Service
				strict(&s)
				o.services = append(o.services, s)
			case appsv1.SchemeGroupVersion.WithKind("Deployment"):
				var d appsv1.Deployment
				strict(&d)
				o.deploys = append(o.deploys, d)
			case corev1.SchemeGroupVersion.WithKind("ConfigMap"):
				var c corev1.ConfigMap
				strict(&c)
				o.configs = append(o.configs, c)
			default:
				t.Fatalf("%s document %d: unexpected %v", f.Name, i, gvk)
			}
		}
	}
	return o
}

func (o objects) service(t *testing.T, name string) corev1.Service {
	t.Helper()
	for _, s := range o.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %s", name)
	return corev1.Service{}
}

// argAfter is the value following flag in args.
func argAfter(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestManifests decodes the rendered manifests into the Kubernetes API
// types and checks what running the fleet as shards depends on.
func TestManifests(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    func(*Params)
	}{
		{"defaults", func(*Params) {}},
		{"capture in the image", func(p *Params) { p.CaptureInImage = "/captures/x.pcap" }},
		{"relay and pvc", func(p *Params) {
			p.Relay, p.CapturePVC, p.Shards, p.Clients, p.Name = true, "captures", 16, 19000, "big"
			p.RunArgs = []string{"--clients", "19000", "--receive-only"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			tc.p(&p)
			files, err := Render(p)
			if err != nil {
				t.Fatal(err)
			}
			o := decode(t, files)
			checkFleet(t, p, o)
			if p.Relay {
				checkRelay(t, p, o)
			} else if len(o.deploys) != 0 {
				t.Errorf("a relay Deployment without --relay")
			}
		})
	}
}

func checkFleet(t *testing.T, p Params, o objects) {
	if len(o.jobs) != 1 {
		t.Fatalf("%d Jobs, want 1", len(o.jobs))
	}
	j := o.jobs[0]
	spec := j.Spec
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completion mode %v, want Indexed", spec.CompletionMode)
	}
	if spec.Parallelism == nil || spec.Completions == nil || *spec.Parallelism != *spec.Completions || int(*spec.Completions) != p.Shards {
		t.Errorf("parallelism %v, completions %v; want both %d", spec.Parallelism, spec.Completions, p.Shards)
	}
	pod := spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restart policy %q", pod.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]

	// The index reaches the container's environment, and --shard names
	// it as Kubernetes expands a variable in args: $(NAME), NAME defined
	// in the container's env.
	var idx *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == IndexEnv {
			idx = &c.Env[i]
		}
	}
	if idx == nil || idx.ValueFrom == nil || idx.ValueFrom.FieldRef == nil ||
		idx.ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("JOB_COMPLETION_INDEX does not come from the completion index annotation: %+v", idx)
	}
	if got, want := argAfter(c.Args, "--shard"), fmt.Sprintf("$(%s)/%d", IndexEnv, p.Shards); got != want {
		t.Errorf("--shard %q, want %q", got, want)
	}
	if slices.Contains(c.Args, "--shards") {
		t.Errorf("--shards in the fleet's args %q: a shard process is told --shard i/n only", c.Args)
	}

	// The barrier is shard 0's DNS name under the headless Service.
	svc := o.service(t, pod.Subdomain)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("service %s: clusterIP %q publishNotReady %v; want headless, publishing not-ready pods", svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	if !selects(svc.Spec.Selector, spec.Template.Labels) {
		t.Errorf("service selector %v does not select the pods %v", svc.Spec.Selector, spec.Template.Labels)
	}
	if want := fmt.Sprintf("%s-0.%s:%d", j.Name, pod.Subdomain, BarrierPort); argAfter(c.Args, "--barrier") != want {
		t.Errorf("--barrier %q, want %q (pod 0's hostname in the subdomain)", argAfter(c.Args, "--barrier"), want)
	}

	// Requests and limits, sized from the per-client memory.
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	per := (p.Clients + p.Shards - 1) / p.Shards
	need := resource.MustParse(fmt.Sprintf("%dKi", per*p.MemoryPerClientKiB))
	if req.Memory().Cmp(need) < 0 || lim.Memory().Cmp(*req.Memory()) < 0 {
		t.Errorf("memory request %v (limit %v) for %d clients per shard: want at least %v", req.Memory(), lim.Memory(), per, &need)
	}

	// The capture is mounted where --capture reads it (or is in the image).
	capture := argAfter(c.Args, "--capture")
	mounted := p.CaptureInImage != "" && capture == p.CaptureInImage && len(pod.Volumes) == 0
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(capture, m.MountPath+"/") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case p.CapturePVC != "" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == p.CapturePVC:
				mounted = true
			case p.CapturePVC == "" && v.ConfigMap != nil && v.ConfigMap.Name == p.Name+"-capture":
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("--capture %s is on no mounted capture volume: mounts %+v, volumes %+v", capture, c.VolumeMounts, pod.Volumes)
	}

	// Prometheus finds every shard's metrics port.
	ann := spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v", ann)
	}
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return fmt.Sprint(cp.ContainerPort) == ann["prometheus.io/port"] }) ||
		argAfter(c.Args, "--metrics") != ":"+ann["prometheus.io/port"] {
		t.Errorf("prometheus.io/port %q is not the container's metrics port (%v, --metrics %s)", ann["prometheus.io/port"], c.Ports, argAfter(c.Args, "--metrics"))
	}
	if argAfter(c.Args, "--summary") != "-" {
		t.Errorf("--summary %q: want - (stdout, for kubectl logs)", argAfter(c.Args, "--summary"))
	}
	for _, a := range p.RunArgs {
		if !slices.Contains(c.Args, a) {
			t.Errorf("run flag %q missing from the args %v", a, c.Args)
		}
	}
}

func checkRelay(t *testing.T, p Params, o objects) {
	if len(o.deploys) != 1 {
		t.Fatalf("%d Deployments, want the relay", len(o.deploys))
	}
	d := o.deploys[0]
	if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("relay selector %v does not select its pods %v", d.Spec.Selector, d.Spec.Template.Labels)
	}
	svc := o.service(t, p.Name+"-relay")
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("relay service selector %v", svc.Spec.Selector)
	}
	fleet := o.jobs[0].Spec.Template.Spec.Containers[0]
	if want := fmt.Sprintf("%s:%d", svc.Name, RelayPort); argAfter(fleet.Args, "--target") != want {
		t.Errorf("fleet --target %q, want %q", argAfter(fleet.Args, "--target"), want)
	}
	rc := d.Spec.Template.Spec.Containers[0]
	if argAfter(rc.Args, "--listen") != fmt.Sprintf(":%d", RelayPort) || rc.Resources.Requests.Cpu().IsZero() {
		t.Errorf("relay args %v resources %+v", rc.Args, rc.Resources)
	}
}

func TestRenderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    func(*Params)
		want string
	}{
		{"shards", func(p *Params) { p.Shards = 0 }, "--shards"},
		{"name", func(p *Params) { p.Name = "Big_Name" }, "--name"},
		{"reserved flag", func(p *Params) { p.RunArgs = []string{"--shard=1/2"} }, "set it themselves"},
		{"target with relay", func(p *Params) { p.Relay, p.RunArgs = true, []string{"--target", "x:1"} }, "--target with --relay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			tc.p(&p)
			if _, err := Render(p); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// Example are the parameters deploy/kubernetes is rendered with (the
// README's example run).
func exampleParams() Params {
	p := DefaultParams()
	p.Relay = true
	p.Clients = 1000
	p.RunArgs = []string{"--clients", "1000", "--senders", "20", "--loop=12s,48s", "--login-interval", "20ms", "--duration", "5m"}
	return p
}

// TestDeployDirUpToDate: deploy/kubernetes is the example rendering
// (go test ./internal/k8s -update rewrites it).
func TestDeployDirUpToDate(t *testing.T) {
	files, err := Render(exampleParams())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "deploy", "kubernetes")
	for _, f := range files {
		testproc.Golden(t, filepath.Join(dir, f.Name), f.Data, *update, "-update")
	}
}

// TestCaptureConfigMap: the capture's ConfigMap decodes strictly, holds
// the bytes, and is the one the shard pods mount.
func TestCaptureConfigMap(t *testing.T) {
	p := DefaultParams()
	// Every byte value, over the size of a small capture.
	capture := make([]byte, 300<<10)
	for i := range capture {
		capture[i] = byte(i * 7)
	}
	cm, err := CaptureConfigMap(p, capture)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, append([]File{cm}, files...))
	if len(o.configs) != 1 || !bytes.Equal(o.configs[0].BinaryData[p.CaptureFile], capture) {
		t.Fatalf("the ConfigMap does not hold the capture as %s", p.CaptureFile)
	}
	var mounted bool
	for _, v := range o.jobs[0].Spec.Template.Spec.Volumes {
		mounted = mounted || v.ConfigMap != nil && v.ConfigMap.Name == o.configs[0].Name
	}
	if !mounted {
		t.Errorf("the pods do not mount ConfigMap %s", o.configs[0].Name)
	}
	if _, err := CaptureConfigMap(p, make([]byte, MaxConfigMapCapture+1)); err == nil || !strings.Contains(err.Error(), "--capture-pvc") {
		t.Errorf("an oversized capture: %v", err)
	}
}
