package k8s

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Images are built from one static binary each, with no base image: no
// Docker daemon, no registry and no shell in the image. The binary sits in
// BinDir, which is also the image's PATH, so the manifests' `command:
// ["replay"]` runs it here as in the Dockerfile's image.
const (
	BinDir = "/usr/local/bin"
	// LocalRegistry names images that only exist where they were loaded
	// (`ctr images import`, `docker load`); nothing is ever pulled from it.
	LocalRegistry = "localhost"
	// imageUser is nobody: the programs need no privilege.
	imageUser = "65534:65534"
)

// epoch is every file's and the image's time, so that one binary always
// gives the same image digest (and the same content-derived tag).
var epoch = time.Unix(0, 0).UTC()

// ErrNotStatic is returned for a binary that needs a dynamic loader: it
// cannot run in an image with no base. Build with CGO_ENABLED=0.
var ErrNotStatic = errors.New("not a static binary (build it with CGO_ENABLED=0)")

// Image is one container image built from a static binary.
type Image struct {
	// Name is the binary's name in the image and the repository's last
	// path element: reprise-<name>.
	Name string
	// Ref is where the image is tagged (and pushed): registry/reprise-name:tag.
	Ref name.Tag
	img v1.Image
}

// Digest is the image manifest's digest.
func (im Image) Digest() (string, error) {
	h, err := im.img.Digest()
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

// ContentTag is the default tag of an image of content (its binary and
// the files put beside it): derived from those bytes, so a changed binary
// or capture gets a new tag, and the pull policy IfNotPresent never runs a
// stale image that was loaded under the same name.
func ContentTag(content []byte) string {
	s := sha256.Sum256(content)
	return "sha-" + hex.EncodeToString(s[:6])
}

// ImageFile is a file added to an image beside the binary (a capture).
type ImageFile struct {
	// Path is absolute, in a directory of its own (not BinDir).
	Path string
	Data []byte
}

// CaptureDir is where `replay k8s image --capture` puts captures in the
// replay image.
const CaptureDir = "/captures"

// BuildImage makes the image of one static Linux binary: one layer holding
// BinDir/<prog>, the files and an empty /tmp, with the binary as the
// entrypoint. registry is where the image will live ("" is LocalRegistry)
// and tag "" means ContentTag of the binary and the files.
func BuildImage(prog, binaryPath string, files []ImageFile, registry, tag string) (Image, error) {
	bin, err := os.ReadFile(binaryPath)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", prog, err)
	}
	arch, err := staticArch(bin)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %s: %w", prog, binaryPath, err)
	}
	if registry == "" {
		registry = LocalRegistry
	}
	if tag == "" {
		all := bin
		for _, f := range files {
			all = append(append(slices.Clip(all), f.Path...), f.Data...)
		}
		tag = ContentTag(all)
	}
	ref, err := name.NewTag(fmt.Sprintf("%s/reprise-%s:%s", strings.TrimSuffix(registry, "/"), prog, tag), name.WeakValidation)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", prog, err)
	}
	layer, err := binaryLayer(prog, bin, files)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", prog, err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), layer)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", prog, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", prog, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{path.Join(BinDir, prog)},
		Env:        []string{"PATH=" + BinDir},
		User:       imageUser,
		WorkingDir: "/",
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return Image{}, fmt.Errorf("image %s: %w", prog, err)
	}
	return Image{Name: prog, Ref: ref, img: img}, nil
}

// staticArch is the image architecture of a static Linux ELF executable.
func staticArch(bin []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("not a Linux executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", ErrNotStatic
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("architecture %v: want x86-64 or arm64", f.Machine)
}

// binaryLayer is the gzipped tar of the image's only layer.
func binaryLayer(prog string, bin []byte, files []ImageFile) (v1.Layer, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dirs := []string{"tmp/", "usr/", "usr/local/", strings.TrimPrefix(BinDir, "/") + "/"}
	all := append([]ImageFile{{Path: path.Join(BinDir, prog), Data: bin}}, files...)
	for _, f := range files {
		d := strings.TrimPrefix(path.Dir(f.Path), "/") + "/"
		if !path.IsAbs(f.Path) || d == "/" || d == dirs[3] || strings.Contains(d, "/./") || strings.Contains(d, "..") || strings.Count(d, "/") != 1 {
			return nil, fmt.Errorf("image file %s: want /dir/name", f.Path)
		}
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for i, f := range all {
		mode := int64(0o644)
		if i == 0 {
			mode = 0o755
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: mode, Size: int64(len(f.Data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteTarball writes the image as one tar that is both an OCI image
// layout (oci-layout, index.json, blobs/) and a `docker save` archive
// (manifest.json naming the same blobs), as Docker 25 writes it: `ctr
// images import` and `docker load` both read it and tag it im.Ref.
func (im Image) WriteTarball(w io.Writer) error {
	tw := tar.NewWriter(w)
	if err := im.writeTar(tw); err != nil {
		return fmt.Errorf("write image %s: %w", im.Ref, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write image %s: %w", im.Ref, err)
	}
	return nil
}

func (im Image) writeTar(tw *tar.Writer) error {
	file := func(name string, data []byte) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blob := func(d v1.Hash) string { return "blobs/" + d.Algorithm + "/" + d.Hex }

	rawManifest, err := im.img.RawManifest()
	if err != nil {
		return err
	}
	manifest, err := im.img.Manifest()
	if err != nil {
		return err
	}
	rawConfig, err := im.img.RawConfigFile()
	if err != nil {
		return err
	}
	digest, err := im.img.Digest()
	if err != nil {
		return err
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := file(blob(digest), rawManifest); err != nil {
		return err
	}
	if err := file(blob(manifest.Config.Digest), rawConfig); err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range manifest.Layers {
		layer, err := im.img.LayerByDigest(l.Digest)
		if err != nil {
			return err
		}
		rc, err := layer.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := file(blob(l.Digest), data); err != nil {
			return err
		}
		layerPaths = append(layerPaths, blob(l.Digest))
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1, Size: int64(len(rawManifest)), Digest: digest,
			Annotations: map[string]string{
				// containerd names the imported image from the first,
				// OCI tools from the second.
				"io.containerd.image.name":          im.Ref.Name(),
				"org.opencontainers.image.ref.name": im.Ref.TagStr(),
			},
		}},
	}
	rawIndex, err := json.Marshal(index)
	if err != nil {
		return err
	}
	if err := file("index.json", rawIndex); err != nil {
		return err
	}
	docker, err := json.Marshal([]dockerManifest{{Config: blob(manifest.Config.Digest), RepoTags: []string{im.Ref.String()}, Layers: layerPaths}})
	if err != nil {
		return err
	}
	return file("manifest.json", docker)
}

// dockerManifest is one entry of a `docker save` archive's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Push uploads the image to its registry, with the credentials of the
// user's Docker config (as `docker push` would use).
func (im Image) Push(ctx context.Context) error {
	if err := remote.Write(im.Ref, im.img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", im.Ref, err)
	}
	return nil
}

// ImageSet names the images `replay k8s image` wrote, as images.json in
// its output directory; `replay k8s render --images` and `replay k8s run
// --images` run them.
type ImageSet struct {
	Replay string `json:"replay"`
	Relay  string `json:"relay"`
	// Pushed: the images are in a registry; otherwise they exist only
	// where they were loaded, and must never be pulled.
	Pushed bool `json:"pushed"`
	// Captures are the captures in the replay image (CaptureDir/<file>).
	Captures []string `json:"captures,omitempty"`
}

// ImageSetFile is the ImageSet's file name in the output directory.
const ImageSetFile = "images.json"

// Apply points the manifests at the set's images, with the pull policy
// that works for them: IfNotPresent when pushed (the tag is the content's,
// so a node's copy is never stale), Never when only loaded.
// With one capture in the image and no other capture source, the fleet
// replays that one.
func (s ImageSet) Apply(p *Params) {
	p.Image, p.RelayImage, p.PullPolicy = s.Replay, s.Relay, "Never"
	if s.Pushed {
		p.PullPolicy = "IfNotPresent"
	}
	if len(s.Captures) == 1 && p.CapturePVC == "" && p.CaptureInImage == "" {
		p.CaptureInImage = s.Captures[0]
	}
}

// WriteImageSet writes dir/images.json.
func WriteImageSet(dir string, s ImageSet) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path.Join(dir, ImageSetFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write image set: %w", err)
	}
	return nil
}

// ReadImageSet reads dir/images.json.
func ReadImageSet(dir string) (ImageSet, error) {
	var s ImageSet
	b, err := os.ReadFile(path.Join(dir, ImageSetFile))
	if err != nil {
		return s, fmt.Errorf("read image set (written by `replay k8s image --out %s`): %w", dir, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%s: %w", path.Join(dir, ImageSetFile), err)
	}
	if s.Replay == "" || s.Relay == "" {
		return s, fmt.Errorf("%s: want both the replay and the relay image", path.Join(dir, ImageSetFile))
	}
	return s, nil
}
