package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/cli"
	"github.com/reprise-harness/reprise/internal/k8s"
)

// TestK8sImageThenRender: the images `replay k8s image` writes are the
// ones `replay k8s render --images` runs, never pulled, with the capture
// put in the image.
func TestK8sImageThenRender(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "static")
	build := exec.Command("go", "build", "-o", bin, "../../internal/k8s/testdata/static")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	capture := filepath.Join(dir, "room.pcap")
	if err := os.WriteFile(capture, []byte("capture bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "images")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"k8s", "image", "--replay", bin, "--relay", bin, "--capture", capture, "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("k8s image: %v\n%s", err, stderr.String())
	}
	set, err := k8s.ReadImageSet(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"replay.tar", "relay.tar"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stdout.String(), set.Replay) || !strings.Contains(stdout.String(), set.Relay) {
		t.Errorf("printed %q, not the images %+v", stdout.String(), set)
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"k8s", "render", "--images", out, "--relay", "--", "--clients", "8", "--receive-only"}, &stdout, &stderr); err != nil {
		t.Fatalf("k8s render: %v\n%s", err, stderr.String())
	}
	y := stdout.String()
	for _, want := range []string{`image: "` + set.Replay + `"`, `image: "` + set.Relay + `"`, "imagePullPolicy: Never", `- "/captures/room.pcap"`} {
		if !strings.Contains(y, want) {
			t.Errorf("the rendering has no %s", want)
		}
	}
	if strings.Contains(y, "volumes:") {
		t.Errorf("a capture volume although the capture is in the image")
	}

	// --out DIR: made when it does not exist.
	rdir := filepath.Join(dir, "new", "manifests")
	if err := run(context.Background(), []string{"k8s", "render", "--images", out, "--out", rdir, "--", "--clients", "8", "--receive-only"}, &stdout, &stderr); err != nil {
		t.Fatalf("k8s render --out: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(rdir, "fleet.yaml")); err != nil {
		t.Error(err)
	}

	// The tag is the content's: the same binary with another capture is
	// another image; with none, the binary's own hash.
	if err := os.WriteFile(capture, []byte("other capture bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "images2")
	if err := run(context.Background(), []string{"k8s", "image", "--replay", bin, "--relay", bin, "--capture", capture, "--out", out2}, &stdout, &stderr); err != nil {
		t.Fatalf("k8s image: %v\n%s", err, stderr.String())
	}
	set2, err := k8s.ReadImageSet(out2)
	if err != nil {
		t.Fatal(err)
	}
	if set2.Replay == set.Replay {
		t.Errorf("a changed capture kept the replay image's tag %s", set.Replay)
	}
	binBytes, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(set2.Relay, ":"+k8s.ContentTag(binBytes)) {
		t.Errorf("relay image %s: want the tag of its binary, %s", set2.Relay, k8s.ContentTag(binBytes))
	}
}

func TestK8sRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"k8s", "image", "--push"}, "--push needs --registry"},
		{[]string{"k8s", "run", "--", "--clients", "4"}, "want one capture"},
		{[]string{"k8s", "run", "--capture", "x.pcap", "--capture-pvc", "c", "--", "--clients", "4"}, "want one capture"},
		{[]string{"k8s", "render", "--pull-policy", "Sometimes"}, "--pull-policy"},
		{[]string{"capacity", "--capture", "x.pcap", "--loop=1s,2s", "--relay"}, "--relay goes with --k8s"},
		{[]string{"capacity", "--capture", "x.pcap", "--loop=1s,2s", "--k8s"}, "--k8s needs --relay"},
		{[]string{"compare", "--capture", "x.pcap", "--clients", "4", "--senders", "1", "--duration", "1s", "--k8s", "--local", "--relay"}, "--k8s and --local"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		var ue cli.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}
