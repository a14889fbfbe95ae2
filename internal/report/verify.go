package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
)

// imgSrc finds the images index.html shows.
var imgSrc = regexp.MustCompile(`<img src="([^"]+)"`)

// Verify checks a report directory the way a reader would find it:
// summary.json and series.csv parse, index.html shows every chart and each
// image it references is a file next to it, and every PNG decodes to a
// picture with real content (not one flat colour). It returns the parsed
// summary.
func Verify(dir string) (Summary, error) {
	var sum Summary
	js, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		return sum, fmt.Errorf("verify: %w", err)
	}
	if err := json.Unmarshal(js, &sum); err != nil {
		return sum, fmt.Errorf("verify %s: %w", SummaryFile, err)
	}
	if err := verifyCSV(filepath.Join(dir, SeriesFile)); err != nil {
		return sum, err
	}
	if err := VerifyHeadline(dir, sum); err != nil {
		return sum, err
	}
	if err := VerifyPeaks(dir, sum); err != nil {
		return sum, err
	}
	page, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		return sum, fmt.Errorf("verify: %w", err)
	}
	if err := verifyCardsShown(page, sum); err != nil {
		return sum, err
	}
	refs := imgSrc.FindAllSubmatch(page, -1)
	if len(refs) < len(Charts) {
		return sum, fmt.Errorf("verify %s: %d images, want %d", IndexFile, len(refs), len(Charts))
	}
	var errs []error
	for _, m := range refs {
		name := string(m[1])
		if filepath.IsAbs(name) || filepath.Base(name) != name {
			errs = append(errs, fmt.Errorf("verify %s: image %q is not a file alongside it", IndexFile, name))
			continue
		}
		errs = append(errs, VerifyPNG(filepath.Join(dir, name)))
	}
	return sum, errors.Join(errs...)
}

func verifyCSV(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	if _, err := readSeriesHeader(r); err != nil {
		return fmt.Errorf("verify %s: %w", filepath.Base(path), err)
	}
	rows, err := r.ReadAll()
	if err != nil {
		return fmt.Errorf("verify %s: %w", filepath.Base(path), err)
	}
	if len(rows) < 1 {
		return fmt.Errorf("verify %s: no samples", filepath.Base(path))
	}
	return nil
}

// VerifyPNG checks that path decodes as a PNG with content: several
// colours and at least 0.5% of its pixels not white.
func VerifyPNG(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return fmt.Errorf("verify %s: %w", filepath.Base(path), err)
	}
	colors, inked := pngContent(img)
	b := img.Bounds()
	if colors < 8 || float64(inked) < 0.005*float64(b.Dx()*b.Dy()) {
		return fmt.Errorf("verify %s: looks blank: %d colours, %d non-white pixels of %d",
			filepath.Base(path), colors, inked, b.Dx()*b.Dy())
	}
	return nil
}

// pngContent counts distinct colours and pixels that are not white.
func pngContent(img image.Image) (colors, inked int) {
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

// VerifyHeadline checks that a compare report's headline is what its own
// series.csv says: each scenario judged again from the samples written,
// with the requested counts and objectives of summary.json, must give the
// same line. A capacity search's answer comes from its levels and is not
// checked here.
func VerifyHeadline(dir string, sum Summary) error {
	if sum.Capacity != nil {
		return nil
	}
	runs, err := readSeriesFile(dir)
	if err != nil {
		return err
	}
	slo, err := ParseSLO(sum.SLO)
	if err != nil {
		return fmt.Errorf("verify %s: %w", SummaryFile, err)
	}
	requested := map[string]int{}
	for _, sc := range sum.Scenarios {
		requested[sc.Scenario] = sc.Headline.Requested
	}
	for i := range runs {
		runs[i].Requested = requested[runs[i].Scenario]
	}
	again := Analyze(Input{Runs: runs, SLO: &slo})
	if again.Headline != sum.Headline {
		return fmt.Errorf("verify: the headline is not what %s says:\n  %s: %s\n  %s: %s", SeriesFile, SummaryFile, sum.Headline, SeriesFile, again.Headline)
	}
	if sum.Cards == nil { // a report written before the cards
		return nil
	}
	if len(again.Cards) != len(sum.Cards) {
		return fmt.Errorf("verify: %d answer cards in %s, %d from %s", len(sum.Cards), SummaryFile, len(again.Cards), SeriesFile)
	}
	for i, c := range sum.Cards {
		if a := again.Cards[i]; cardAnswer(a) != cardAnswer(c) {
			return fmt.Errorf("verify: the answer card is not what %s says:\n  %s: %s\n  %s: %s", SeriesFile, SummaryFile, cardAnswer(c), SeriesFile, cardAnswer(a))
		}
	}
	return nil
}

// cardAnswer is what a card answers, without its health (which comes from
// the run's counters as well as the samples): scenario, number, what
// decided it and the marks.
func cardAnswer(c Card) string {
	return c.Scenario + ": " + c.Title() + "; " + c.DecidedBy + "; " + marksText(c.Marks)
}

// verifyCardsShown: index.html shows each card's number and what decided
// it, as summary.json has them.
func verifyCardsShown(page []byte, sum Summary) error {
	for _, c := range sum.Cards {
		for _, text := range []string{c.Title(), c.DecidedBy} {
			if !bytes.Contains(page, []byte(html.EscapeString(text))) {
				return fmt.Errorf("verify %s: the answer card of %s does not show %q", IndexFile, c.Scenario, text)
			}
		}
	}
	return nil
}

// VerifyPeaks checks that each run's peak send and receive Gbps in
// summary.json are the rolling peaks of its own series.csv, the rule the
// table's rows and the charts' lines share (RollingMeans). series.csv
// keeps numbers exactly, but reports written before it did kept six
// decimals, so a peak read back may differ in its last digits, never more.
func VerifyPeaks(dir string, sum Summary) error {
	runs, err := readSeriesFile(dir)
	if err != nil {
		return err
	}
	type key struct {
		scenario string
		repeat   int
	}
	pts := map[key][]Point{}
	for _, r := range runs {
		pts[key{r.Scenario, r.Repeat}] = r.Series.Points
	}
	var errs []error
	for _, rs := range sum.Runs {
		p, ok := pts[key{rs.Scenario, rs.Repeat}]
		if !ok {
			errs = append(errs, fmt.Errorf("verify: %s #%d has no rows in %s", rs.Scenario, rs.Repeat, SeriesFile))
			continue
		}
		for _, c := range []struct {
			name string
			got  Num
			get  func(Point) float64
		}{
			{"peak send Gbps", rs.PeakSendGbps, func(p Point) float64 { return p.SendGbps }},
			{"peak receive Gbps", rs.PeakRecvGbps, func(p Point) float64 { return p.RecvGbps }},
		} {
			if again := RollingPeak(p, c.get); !sameRead(float64(c.got), float64(again)) {
				errs = append(errs, fmt.Errorf("verify: %s #%d %s is %v in %s, %v from %s", rs.Scenario, rs.Repeat, c.name, c.got, SummaryFile, again, SeriesFile))
			}
		}
		// The host's other work, measured (host_other_cores), and the
		// seconds it made the host busy, counted again from the samples.
		// (Reports written before the column judged with a bound.)
		_, _, busy, _, other := healthSeconds(p)
		measured := slices.ContainsFunc(p, func(p Point) bool { return !math.IsNaN(p.HostOtherCores) })
		if measured && (!sameRead(float64(rs.HostBusyS), float64(busy)) || !sameRead(float64(rs.HostOtherCoresMax), float64(other))) {
			errs = append(errs, fmt.Errorf("verify: %s #%d host busy %v s with at most %v cores of other work in %s, %v s and %v cores from %s",
				rs.Scenario, rs.Repeat, rs.HostBusyS, rs.HostOtherCoresMax, SummaryFile, busy, other, SeriesFile))
		}
	}
	return errors.Join(errs...)
}

// sameRead: want, read back from series.csv's rounded cells, is got.
func sameRead(got, want float64) bool {
	if math.IsNaN(got) || math.IsNaN(want) {
		return math.IsNaN(got) == math.IsNaN(want)
	}
	return math.Abs(got-want) <= 1e-5+1e-4*math.Abs(want)
}

// readSeriesFile reads dir's series.csv back.
func readSeriesFile(dir string) ([]Run, error) {
	f, err := os.Open(filepath.Join(dir, SeriesFile))
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	runs, err := ReadSeriesCSV(f)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", SeriesFile, err)
	}
	return runs, nil
}
