package report

import (
	"context"
	"fmt"
	"html"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// chromiumFlags start Debian's Chromium headless on a closed machine:
// without the background-networking flags it keeps dialling Google.
var chromiumFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"}

// chromium runs the browser on page with args, in a new profile, and
// returns what it printed on stdout.
func chromium(t *testing.T, bin, page string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all := append(append(append([]string{}, chromiumFlags...), "--user-data-dir="+t.TempDir()), args...)
	cmd := exec.CommandContext(ctx, bin, append(all, "file://"+page)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, testproc.Tail(stderr.String(), 20))
	}
	return string(out)
}

// The parts of an answer card as Chromium's DOM has them.
var (
	domCard   = regexp.MustCompile(`<div class="card" data-scenario="([^"]*)"`)
	domHeld   = regexp.MustCompile(`<div class="held">([^<]*)</div>`)
	domDecide = regexp.MustCompile(`<div class="decided">([^<]*)</div>`)
	domMark   = regexp.MustCompile(`<li class="mark [a-z]+" data-objective="([^"]*)" data-state="([^"]*)"`)
	domBadge  = regexp.MustCompile(`<a class="badge" data-cause="([^"]*)" href="#([^"]*)"`)
)

// domCardText is a card as read back from the DOM, in the shape of
// cardAnswer plus its badges.
func domCards(dom string) []string {
	var out []string
	locs := domCard.FindAllStringSubmatchIndex(dom, -1)
	for i, loc := range locs {
		end := len(dom)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		if j := strings.Index(dom[loc[0]:end], "</section>"); j >= 0 {
			end = loc[0] + j
		}
		chunk := dom[loc[0]:end]
		s := html.UnescapeString(dom[loc[2]:loc[3]]) + ": "
		if m := domHeld.FindStringSubmatch(chunk); m != nil {
			s += html.UnescapeString(m[1])
		}
		if m := domDecide.FindStringSubmatch(chunk); m != nil {
			s += "; " + html.UnescapeString(m[1])
		}
		for _, m := range domMark.FindAllStringSubmatch(chunk, -1) {
			s += fmt.Sprintf("; %s=%s", html.UnescapeString(m[1]), m[2])
		}
		for _, m := range domBadge.FindAllStringSubmatch(chunk, -1) {
			s += fmt.Sprintf("; badge %s→#%s", html.UnescapeString(m[1]), m[2])
		}
		out = append(out, s)
	}
	return out
}

// wantCard is what domCards should read for c.
func wantCard(c Card) string {
	s := c.Scenario + ": " + c.Title() + "; " + c.DecidedBy
	for _, m := range c.Marks {
		s += fmt.Sprintf("; %s=%s", m.Name(), m.State)
	}
	for _, b := range c.Health {
		s += fmt.Sprintf("; badge %s→#%s", b.Cause, b.Anchor)
	}
	return s
}

// browserCase is a report rendered from recorded series: the card cases
// and the demo's N:N against 1:N (testdata/demo); and a capacity search's.
type browserCase struct {
	name string
	in   Input
}

func browserCases(t *testing.T) []browserCase {
	var out []browserCase
	for _, cc := range cardCases {
		out = append(out, browserCase{cc.name, cc.input(t)})
	}
	sum := readDemoSummary(t)
	slo, err := ParseSLO(sum.SLO)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := readSeriesFile(filepath.Join("testdata", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range runs {
		runs[i].Requested = sum.Scenarios[0].Headline.Requested
		withLoginCounters(&runs[i])
	}
	out = append(out, browserCase{"demo", Input{Title: "reprise compare: make demo, N:N vs 1:N, 200 clients", Generated: sum.Generated,
		Params: sum.Params, Runs: runs, SLO: &slo}})
	// A capacity search's report: levels of 50 and 100, latency over the
	// objective from 80 clients in the second (TestCapacityCard's).
	in := []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	pts := points(in, []float64{5, 5, 5, 5, 5, 5, 5, 150, 300, 300}, make([]float64, 10))
	for i := range pts { // the levels' fleet: 60 % idle, on time
		pts[i].FleetCPUIdlePct, pts[i].ScheduleLagP99Ms, pts[i].HostOtherCores = 60, 1, math.NaN()
		pts[i].SendGbps, pts[i].LatencyP50Ms = 0.001*in[i], 2
	}
	levels := []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 100, 0, 0, 250, 50, 60, 5, 10)}
	capa := Decide("N:N", 100, levels, pts, DefaultSLO())
	out = append(out, browserCase{"capacity", Input{Title: "reprise capacity: 50 to 100 clients by 50", Generated: sum.Generated,
		Runs: []Run{{Scenario: "N:N", Repeat: 1, Requested: 100, Series: Series{Points: pts}}}, Capacity: &capa}})
	return out
}

// withLoginCounters gives a run read back from series.csv the fleet's
// login and disconnect counters at its first and last sample, from the
// cumulative columns series.csv keeps (attempts, failures, clients lost),
// so its report counts logins as the recorded one did. The rest of the
// counters series.csv does not keep stay unmeasured.
func withLoginCounters(r *Run) {
	pts := r.Series.Points
	if len(pts) == 0 {
		return
	}
	last := pts[len(pts)-1]
	r.Series.First.Fleet.Present = true
	r.Series.Last.Fleet = FleetValues{Present: true, LoggedIn: nz(last.LoggedIn), LoginAttempts: nz(last.LoginAttempts),
		LoginsSucceeded: nz(last.LoginAttempts) - nz(last.LoginFailures), LoginsFailed: nz(last.LoginFailures),
		Disconnects: nz(last.FleetDisconnects)}
}

// TestReportInChromium renders each recorded case's report (Write) and
// opens it in headless Chromium: the DOM it built shows every answer card
// as summary.json has it (number, what decided it, each objective's mark,
// each health badge), every badge's anchor is on the page, and a
// screenshot of the page's top is written next to it (with -update the
// demo's is docs/report-example.png).
func TestReportInChromium(t *testing.T) {
	bin := testproc.NeedTool(t, "chromium", "chromium")
	for _, bc := range browserCases(t) {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			sum, err := Write(dir, bc.in)
			if err != nil {
				t.Fatal(err)
			}
			// The cards judged again from series.csv (Verify's check; its
			// PNG checks, slow under -race, are TestWrite's).
			if err := VerifyHeadline(dir, sum); err != nil {
				t.Fatal(err)
			}
			page := filepath.Join(dir, IndexFile)
			dom := chromium(t, bin, page, "--dump-dom")
			got := domCards(dom)
			if len(got) != len(sum.Cards) {
				t.Fatalf("the DOM has %d answer cards, summary.json %d:\n%s", len(got), len(sum.Cards), strings.Join(got, "\n"))
			}
			for i, c := range sum.Cards {
				if want := wantCard(c); got[i] != want {
					t.Errorf("card %d in the DOM:\n  %s\nwant:\n  %s", i, got[i], want)
				}
				for _, b := range c.Health {
					if !strings.Contains(dom, `id="`+b.Anchor+`"`) {
						t.Errorf("badge %s links to #%s, which is not on the page", b.Text, b.Anchor)
					}
				}
			}
			shot := filepath.Join(dir, "screenshot.png")
			chromium(t, bin, page, "--window-size=1280,1400", "--screenshot="+shot)
			if err := VerifyPNG(shot); err != nil {
				t.Fatal(err)
			}
			if *update && bc.name == "demo" {
				b, err := os.ReadFile(shot)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join("..", "..", "docs", "report-example.png"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if out := os.Getenv("REPORT_SCREENSHOTS"); out != "" {
				copyDir(t, dir, filepath.Join(out, bc.name))
			}
		})
	}
}

// copyDir keeps a rendered report (REPORT_SCREENSHOTS=DIR) to look at.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}
