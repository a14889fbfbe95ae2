package k8s

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// staticBinary builds testdata/static with CGO_ENABLED=0.
func staticBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "static")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/static")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// readTar is every regular file of a tar by name.
func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

// blob is the tar's blob for digest, checked against its digest.
func blob(t *testing.T, files map[string][]byte, d v1.Hash) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+d.Hex]
	if !ok {
		t.Fatalf("no blob %s", d)
	}
	if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != d.Hex {
		t.Fatalf("blob %s holds other bytes", d)
	}
	return b
}

func strictJSON(t *testing.T, what string, b []byte, into any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, b)
	}
}

// TestImageTarball: the tarball is an OCI layout and a docker archive of
// the same blobs; the manifest, config and layer decode, and the binary
// is at the entrypoint, executable, byte for byte.
func TestImageTarball(t *testing.T) {
	binPath := staticBinary(t)
	bin, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	capture := ImageFile{Path: CaptureDir + "/a.pcap", Data: []byte("not really a pcap")}
	im, err := BuildImage("replay", binPath, []ImageFile{capture}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(im.Ref.String(), "localhost/reprise-replay:sha-") || im.Ref.TagStr() == ContentTag(bin) {
		t.Errorf("ref %s, want a localhost name and a tag from the binary and the capture", im.Ref)
	}
	var buf bytes.Buffer
	if err := im.WriteTarball(&buf); err != nil {
		t.Fatal(err)
	}
	files := readTar(t, bytes.NewReader(buf.Bytes()))

	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", files["oci-layout"])
	}
	var index v1.IndexManifest
	strictJSON(t, "index.json", files["index.json"], &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index: %d manifests", len(index.Manifests))
	}
	desc := index.Manifests[0]
	if desc.Annotations["io.containerd.image.name"] != im.Ref.Name() || desc.Annotations["org.opencontainers.image.ref.name"] != im.Ref.TagStr() {
		t.Errorf("index annotations %v, want the name %s", desc.Annotations, im.Ref)
	}
	var m v1.Manifest
	strictJSON(t, "manifest", blob(t, files, desc.Digest), &m)
	if m.MediaType != desc.MediaType || len(m.Layers) != 1 {
		t.Fatalf("manifest %+v", m)
	}
	var cf v1.ConfigFile
	strictJSON(t, "config", blob(t, files, m.Config.Digest), &cf)
	if cf.OS != "linux" || cf.Architecture == "" || cf.Config.User == "" || cf.Config.User[0] == '0' {
		t.Errorf("config: os %q arch %q user %q: want linux, an architecture, not root", cf.OS, cf.Architecture, cf.Config.User)
	}
	if len(cf.Config.Entrypoint) != 1 {
		t.Fatalf("entrypoint %v", cf.Config.Entrypoint)
	}
	entry := cf.Config.Entrypoint[0]

	// The layer holds the binary at the entrypoint; its uncompressed
	// digest is the config's diff id.
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, m.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if s := sha256.Sum256(raw); len(cf.RootFS.DiffIDs) != 1 || cf.RootFS.DiffIDs[0].Hex != hex.EncodeToString(s[:]) {
		t.Errorf("diff ids %v do not name the layer", cf.RootFS.DiffIDs)
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	var found, foundCapture bool
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(tr)
		switch "/" + h.Name {
		case entry:
			found = bytes.Equal(got, bin) && h.Mode&0o111 == 0o111
		case capture.Path:
			foundCapture = bytes.Equal(got, capture.Data)
		}
	}
	if !found {
		t.Errorf("the layer has no executable %s holding the binary", entry)
	}
	if !foundCapture {
		t.Errorf("the layer has no %s", capture.Path)
	}
	if !strings.HasPrefix(entry, BinDir+"/") || !strings.Contains(strings.Join(cf.Config.Env, " "), "PATH="+BinDir) {
		t.Errorf("entrypoint %s, env %v: the binary must be on the PATH (the manifests run `replay`)", entry, cf.Config.Env)
	}

	// docker load's view: manifest.json names the same blobs and the tag.
	var dm []dockerManifest
	strictJSON(t, "manifest.json", files["manifest.json"], &dm)
	if len(dm) != 1 || len(dm[0].RepoTags) != 1 || dm[0].RepoTags[0] != im.Ref.String() ||
		dm[0].Config != "blobs/sha256/"+m.Config.Digest.Hex || len(dm[0].Layers) != 1 || dm[0].Layers[0] != "blobs/sha256/"+m.Layers[0].Digest.Hex {
		t.Errorf("manifest.json %+v", dm)
	}
	// and go-containerregistry reads it back as a valid image.
	back, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }, &im.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(back); err != nil {
		t.Errorf("read back: %v", err)
	}

	// Same binary, same image.
	again, err := BuildImage("replay", binPath, []ImageFile{capture}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if d1, _ := im.Digest(); d1 != func() string { d, _ := again.Digest(); return d }() {
		t.Errorf("two builds of one binary differ")
	}
}

func TestImageRefuses(t *testing.T) {
	dynamic := "/bin/sh"
	if _, err := os.Stat(dynamic); err != nil {
		t.Skip("no /bin/sh")
	}
	if _, err := BuildImage("replay", dynamic, nil, "", ""); !errors.Is(err, ErrNotStatic) {
		t.Errorf("a dynamic binary: err %v, want ErrNotStatic", err)
	}
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := BuildImage("replay", notELF, nil, "", ""); err == nil || !strings.Contains(err.Error(), "not a Linux executable") {
		t.Errorf("a script: err %v", err)
	}
}

// TestImagePush pushes to a registry on 127.0.0.1 and pulls back the same
// digest.
func TestImagePush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	im, err := BuildImage("relay", staticBinary(t), nil, host+"/team", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Push(context.Background()); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host + "/team/reprise-relay:v1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	gd, _ := got.Digest()
	if want, _ := im.Digest(); gd.String() != want {
		t.Errorf("pulled %s, pushed %s", gd, want)
	}
}

func TestImageSetApply(t *testing.T) {
	dir := t.TempDir()
	want := ImageSet{Replay: "localhost/reprise-replay:sha-1", Relay: "localhost/reprise-relay:sha-2", Captures: []string{"/captures/a.pcap"}}
	if err := WriteImageSet(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadImageSet(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("read %+v %v, wrote %+v", got, err, want)
	}
	p := DefaultParams()
	p.Relay = true
	got.Apply(&p)
	files, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, files)
	fc := o.jobs[0].Spec.Template.Spec.Containers[0]
	rc := o.deploys[0].Spec.Template.Spec.Containers[0]
	if fc.Image != want.Replay || rc.Image != want.Relay || fc.ImagePullPolicy != "Never" || rc.ImagePullPolicy != "Never" {
		t.Errorf("fleet %s (%s), relay %s (%s): want the set's images, never pulled", fc.Image, fc.ImagePullPolicy, rc.Image, rc.ImagePullPolicy)
	}
	if argAfter(fc.Args, "--capture") != "/captures/a.pcap" || len(fc.VolumeMounts) != 0 {
		t.Errorf("--capture %s, mounts %v: want the image's only capture, no volume", argAfter(fc.Args, "--capture"), fc.VolumeMounts)
	}
}
