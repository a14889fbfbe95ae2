package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestGolden(t *testing.T) {
	in := synthInput()
	sum := Analyze(in)
	tests := []struct {
		file string
		fn   func(io.Writer) error
	}{
		{"index.html.golden", func(w io.Writer) error { return WriteHTML(w, sum) }},
		{"series.csv.golden", func(w io.Writer) error { return WriteSeriesCSV(w, in) }},
		{"summary.json.golden", func(w io.Writer) error { return WriteSummaryJSON(w, sum) }},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.fn(&buf); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tt.file)
			if *update {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s differs from the golden file; if intended, run go test ./internal/report -run Golden -update\ngot:\n%s", tt.file, head(buf.Bytes()))
			}
		})
	}
}

func head(b []byte) []byte {
	if len(b) > 2000 {
		return b[:2000]
	}
	return b
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	in := synthInput()
	if _, err := Write(dir, in); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	// Every image index.html shows is a file next to it, and no asset is
	// fetched from the network.
	imgs := regexp.MustCompile(`<img src="([^"]+)"`).FindAllSubmatch(html, -1)
	if len(imgs) != len(Charts) {
		t.Fatalf("index.html shows %d images, want %d", len(imgs), len(Charts))
	}
	for _, m := range imgs {
		CheckPNG(t, filepath.Join(dir, string(m[1])))
	}
	if bytes.Contains(html, []byte("http://")) || bytes.Contains(html, []byte("https://")) {
		t.Error("index.html refers to the network")
	}
	f, err := os.Open(filepath.Join(dir, SeriesFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + 4*40; len(rows) != want {
		t.Errorf("series.csv: %d rows, want %d", len(rows), want)
	}
	js, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if len(back.Runs) != 4 || len(back.Scenarios) != 2 || !back.Runs[0].Quadratic.OK {
		t.Errorf("summary.json read back: %d runs, %d scenarios", len(back.Runs), len(back.Scenarios))
	}
}

// CheckPNG fails unless path is a PNG with real content: not one flat
// colour, and a fair share of non-background pixels.
func CheckPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	colors, inked := PNGContent(img)
	b := img.Bounds()
	if colors < 8 || float64(inked) < 0.005*float64(b.Dx()*b.Dy()) {
		t.Errorf("%s looks blank: %d colours, %d non-white pixels of %d", path, colors, inked, b.Dx()*b.Dy())
	}
}

// PNGContent counts distinct colours and pixels that are not white.
func PNGContent(img image.Image) (colors, inked int) {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				inked++
			}
		}
	}
	return len(seen), inked
}
