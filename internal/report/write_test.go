package report

import (
	"bytes"
	"encoding/csv"
	"flag"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/reprise-harness/reprise/internal/testproc"
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
			testproc.Golden(t, filepath.Join("testdata", tt.file), buf.Bytes(), *update, "-update")
		})
	}
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	in := synthInput()
	if _, err := Write(dir, in); err != nil {
		t.Fatal(err)
	}
	sum, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Runs) != 4 || len(sum.Scenarios) != 2 || !sum.Runs[0].Quadratic.OK {
		t.Errorf("summary.json read back: %d runs, %d scenarios", len(sum.Runs), len(sum.Scenarios))
	}
	html, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(html, []byte("http://")) || bytes.Contains(html, []byte("https://")) {
		t.Error("index.html refers to the network")
	}
	rows, err := csv.NewReader(bytes.NewReader(mustRead(t, filepath.Join(dir, SeriesFile)))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + 4*40; len(rows) != want {
		t.Errorf("series.csv: %d rows, want %d", len(rows), want)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerifyRejectsBlankAndBroken(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(dir, synthInput()); err != nil {
		t.Fatal(err)
	}
	// A flat white image of the same size: decodes, but shows nothing.
	blank := image.NewRGBA(image.Rect(0, 0, 100, 50))
	for i := range blank.Pix {
		blank.Pix[i] = 0xff
	}
	f, err := os.Create(filepath.Join(dir, Charts[0].File))
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, blank); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Verify(dir); err == nil {
		t.Error("blank chart: no error")
	}
	if err := os.WriteFile(filepath.Join(dir, Charts[0].File), []byte("not a png"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(dir); err == nil {
		t.Error("broken chart: no error")
	}
	if err := os.Remove(filepath.Join(dir, Charts[1].File)); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(dir); err == nil {
		t.Error("missing chart: no error")
	}
}
