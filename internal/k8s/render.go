// Package k8s holds the Kubernetes manifests that run a fleet as shards
// (an Indexed Job and its headless Service) and, optionally, the bundled
// relay (a Deployment and its Service), and renders them with a run's
// flags; it also builds the images (image.go), reads whether a run fits
// the nodes (fit.go) and drives the user's kubectl (kubectl.go, pods.go).
// It writes YAML from templates and needs no Kubernetes library; the test
// decodes the output strictly into the API's types. Running a fleet on a
// cluster is internal/launch's (Kubernetes): this package knows no fleet.
package k8s

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Ports the manifests use; the fleet's and the relay's defaults.
const (
	MetricsPort      = wire.FleetMetricsPort
	BarrierPort      = wire.BarrierPort
	RelayPort        = wire.DefaultPort
	RelayMetricsPort = wire.DefaultMetricsPort
)

// IndexEnv is the environment variable an Indexed Job sets to the pod's
// index. The fleet's --shard is "$(IndexEnv)/n": Kubernetes expands the
// variable in a container's args, so each pod is told its shard as a
// process on a host is.
const IndexEnv = "JOB_COMPLETION_INDEX"

// Params are one rendering. DefaultParams gives the defaults of
// `replay k8s render`.
type Params struct {
	// Name prefixes every object: <name>-fleet, <name>-relay.
	Name string
	// Image runs the fleet and RelayImage the relay (Image when empty);
	// PullPolicy is both containers' imagePullPolicy: Never for images
	// only loaded on the nodes (`replay k8s image` without --registry).
	Image      string
	RelayImage string
	PullPolicy string
	// Shards is the Job's parallelism and completions.
	Shards int
	// Clients is the whole fleet's --clients (memory sizing).
	Clients int
	// RunArgs are the replay run's flags (--clients, --loop, ...), passed
	// as they are; the manifests add --capture, --shard, --barrier,
	// --metrics, --summary and, with Relay, --target.
	RunArgs []string

	// CaptureFile is the capture's file name inside its ConfigMap or
	// volume; CapturePVC, when set, mounts that claim instead of the
	// ConfigMap <name>-capture.
	CaptureFile string
	CapturePVC  string
	// CaptureInImage, when set, is the capture's path inside the image
	// (`replay k8s image --capture`): no volume is mounted.
	CaptureInImage string

	// MemoryPerClientKiB and BaseMemoryMiB size each shard's memory
	// request; the limit is twice the request.
	MemoryPerClientKiB int
	BaseMemoryMiB      int
	CPU                string
	// MemoryMiB, when set, is each shard's memory request (Plan's), in
	// place of the one from MemoryPerClientKiB and BaseMemoryMiB.
	MemoryMiB int64
	// CaptureConfigMap is the ConfigMap the capture is mounted from
	// (default <name>-capture).
	CaptureConfigMap string

	// Relay adds the relay Deployment and Service, and points the fleet
	// at it. RelayArgs are extra relay flags.
	Relay       bool
	RelayArgs   []string
	RelayCPU    string
	RelayMemory string
}

// DefaultShardCPU is a shard's CPU request when no cluster was asked
// (k8s render without --cpu).
const DefaultShardCPU = "250m"

// DefaultParams are the defaults of `replay k8s render`.
func DefaultParams() Params {
	return Params{
		Name: "reprise", Image: "ghcr.io/reprise-harness/reprise:latest", PullPolicy: "IfNotPresent", Shards: 4, Clients: 1000,
		CaptureFile: "capture.pcap", MemoryPerClientKiB: ShardPerClientKiB, BaseMemoryMiB: ShardBaseMiB,
		RelayCPU: "500m", RelayMemory: "256Mi",
	}
}

//go:embed templates/*.tmpl
var templates embed.FS

var tmpl = template.Must(template.New("").Funcs(template.FuncMap{"quote": quote}).ParseFS(templates, "templates/*.tmpl"))

// quote is a YAML double-quoted scalar (JSON's string syntax is valid YAML).
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// view is what the templates see.
type view struct {
	Params
	MetricsPort, BarrierPort, RelayPort, RelayMetricsPort int
	FleetArgs                                             []string
	ClientsPerShard                                       int
	MemoryRequest, MemoryLimit                            string
	CaptureDir, CaptureKind, CaptureSource                string
}

// File is one rendered manifest.
type File struct {
	Name string
	Data []byte
}

// Render renders the manifests: fleet.yaml, and relay.yaml with Relay.
func Render(p Params) ([]File, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	per := (p.Clients + p.Shards - 1) / p.Shards
	reqMiB := int64(p.BaseMemoryMiB + (per*p.MemoryPerClientKiB+1023)/1024)
	if p.MemoryMiB > 0 {
		reqMiB = p.MemoryMiB
	}
	v := view{
		Params: p, MetricsPort: MetricsPort, BarrierPort: BarrierPort, RelayPort: RelayPort, RelayMetricsPort: RelayMetricsPort,
		ClientsPerShard: per, MemoryRequest: fmt.Sprintf("%dMi", reqMiB), MemoryLimit: fmt.Sprintf("%dMi", 2*reqMiB),
		CaptureDir: "/capture", CaptureKind: "configmap", CaptureSource: p.Name + "-capture",
	}
	if p.CaptureConfigMap != "" {
		v.CaptureSource = p.CaptureConfigMap
	}
	if v.RelayImage == "" {
		v.RelayImage = p.Image
	}
	if v.CPU == "" {
		// No cluster to ask (k8s render): a modest share; `k8s run` and
		// --k8s ask the nodes (Plan).
		v.CPU = DefaultShardCPU
	}
	capture := v.CaptureDir + "/" + p.CaptureFile
	switch {
	case p.CaptureInImage != "":
		v.CaptureKind, capture = "image", p.CaptureInImage
	case p.CapturePVC != "":
		v.CaptureKind, v.CaptureSource = "pvc", p.CapturePVC
	}
	v.FleetArgs = append([]string{
		"--capture", capture,
		"--shard", fmt.Sprintf("$(%s)/%d", IndexEnv, p.Shards),
		"--barrier", fmt.Sprintf("%s-fleet-0.%s-fleet:%d", p.Name, p.Name, BarrierPort),
		"--metrics", fmt.Sprintf(":%d", MetricsPort),
		// The summary as one JSON line on stdout: `kubectl logs` of each
		// pod is what `replay merge` reads.
		"--summary", "-",
	}, p.RunArgs...)
	if p.Relay {
		v.FleetArgs = append(v.FleetArgs, "--target", fmt.Sprintf("%s-relay:%d", p.Name, RelayPort))
		v.RelayArgs = append([]string{"--listen", fmt.Sprintf(":%d", RelayPort), "--metrics", fmt.Sprintf(":%d", RelayMetricsPort)}, p.RelayArgs...)
	}
	names := []string{"fleet.yaml"}
	if p.Relay {
		names = append(names, "relay.yaml")
	}
	var out []File
	for _, n := range names {
		var b bytes.Buffer
		if err := tmpl.ExecuteTemplate(&b, n+".tmpl", v); err != nil {
			return nil, fmt.Errorf("render %s: %w", n, err)
		}
		out = append(out, File{Name: n, Data: b.Bytes()})
	}
	return out, nil
}

// reserved are the flags the manifests set themselves.
var reserved = []string{"--capture", "--shard", "--barrier", "--metrics", "--summary", "--start-at"}

func (p Params) check() error {
	switch {
	case p.Name == "" || strings.ToLower(p.Name) != p.Name || strings.ContainsAny(p.Name, " ./_"):
		return fmt.Errorf("--name %q: lower-case letters, digits and '-'", p.Name)
	case p.Shards < 1:
		return fmt.Errorf("--shards %d: need at least 1", p.Shards)
	case p.Clients < 1:
		return fmt.Errorf("--clients %d: need at least 1", p.Clients)
	case p.Image == "":
		return fmt.Errorf("--image is required")
	case !slices.Contains([]string{"Always", "IfNotPresent", "Never"}, p.PullPolicy):
		return fmt.Errorf("--pull-policy %q: Always, IfNotPresent or Never", p.PullPolicy)
	case p.CaptureFile == "" || strings.Contains(p.CaptureFile, "/"):
		return fmt.Errorf("--capture-file %q: a file name", p.CaptureFile)
	case p.CaptureInImage != "" && p.CapturePVC != "":
		return fmt.Errorf("--image-capture and --capture-pvc: pick one")
	case p.CaptureInImage != "" && !strings.HasPrefix(p.CaptureInImage, "/"):
		return fmt.Errorf("--image-capture %q: an absolute path in the image", p.CaptureInImage)
	}
	for _, a := range p.RunArgs {
		name, _, _ := strings.Cut(a, "=")
		if slices.Contains(reserved, name) {
			return fmt.Errorf("%s: the manifests set it themselves", name)
		}
		if p.Relay && name == "--target" {
			return fmt.Errorf("--target with --relay: the fleet targets the rendered relay")
		}
	}
	return nil
}

// Write writes the files into dir, or to w one after the other (as one
// YAML stream) when dir is empty.
func Write(files []File, dir string, w io.Writer) error {
	for i, f := range files {
		if dir == "" {
			if i > 0 {
				if _, err := io.WriteString(w, "---\n"); err != nil {
					return err
				}
			}
			if _, err := w.Write(f.Data); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return fmt.Errorf("write manifest: %w", err)
		}
	}
	return nil
}

// MaxConfigMapCapture is the largest capture CaptureConfigMap takes: a
// ConfigMap holds at most 1 MiB, and the object needs some of it.
const MaxConfigMapCapture = 1<<20 - 16<<10

// CaptureConfigMap is the manifest (capture.yaml) of the ConfigMap
// <name>-capture the fleet's pods mount the capture from.
func CaptureConfigMap(p Params, capture []byte) (File, error) {
	if len(capture) > MaxConfigMapCapture {
		return File{}, fmt.Errorf("the capture is %d bytes, over a ConfigMap's %d: put it in the image (replay k8s image --capture) or on a volume (--capture-pvc)", len(capture), MaxConfigMapCapture)
	}
	cm := map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":   p.Name + "-capture",
			"labels": map[string]string{"app.kubernetes.io/part-of": "reprise"},
		},
		// JSON is YAML, and a []byte is base64 as binaryData wants.
		"binaryData": map[string][]byte{p.CaptureFile: capture},
	}
	b, err := json.MarshalIndent(cm, "", "  ")
	if err != nil {
		return File{}, err
	}
	return File{Name: "capture.yaml", Data: append(b, '\n')}, nil
}
