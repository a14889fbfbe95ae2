package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// reportSummary is the part of a report's summary.json checked here.
type reportSummary struct {
	Headline  string `json:"headline"`
	Scenarios []struct {
		Scenario string `json:"scenario"`
		Headline struct {
			Requested int      `json:"requested"`
			Held      *float64 `json:"held"`
			AtS       *float64 `json:"at_s"`
			BrokeAt   *float64 `json:"broke_at"`
		} `json:"headline"`
	} `json:"scenarios"`
	Params []struct {
		Name, Value string
	} `json:"params"`
	// Capacity is a capacity search's answer, from its levels: the
	// headline says it, not the run's own headline over its series.
	Capacity *struct {
		Scenario  string   `json:"scenario"`
		Requested int      `json:"requested"`
		Held      *float64 `json:"held"`
		BrokeAt   *float64 `json:"broke_at"`
	} `json:"capacity"`
}

// checkReport checks a compare or capacity report against its own
// series: each scenario's headline holds no more users than series.csv
// saw logged in, the sample it broke at is a row of the series with that
// many logged in, the report's first line says the number, and the fleet
// ran where it should.
func checkReport(dir, fleetDesc string) error {
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return err
	}
	var sum reportSummary
	if err := json.Unmarshal(b, &sum); err != nil {
		return fmt.Errorf("summary.json: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, "series.csv"))
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return fmt.Errorf("series.csv: %w", err)
	}
	if len(rows) < 2 {
		return fmt.Errorf("series.csv: no samples")
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, name := range []string{"scenario", "t_s", "logged_in"} {
		if _, ok := col[name]; !ok {
			return fmt.Errorf("series.csv: no column %s", name)
		}
	}
	var c checker
	c.check(len(sum.Scenarios) > 0, "the report has %d scenarios", len(sum.Scenarios))
	for _, sc := range sum.Scenarios {
		h := sc.Headline
		maxIn, n, empty := 0.0, 0, 0
		brokeRow := math.NaN()
		for _, r := range rows[1:] {
			if r[col["scenario"]] != sc.Scenario {
				continue
			}
			if r[col["logged_in"]] == "" {
				empty++ // a sample whose fleet scrape failed
				continue
			}
			in, err := strconv.ParseFloat(r[col["logged_in"]], 64)
			if err != nil {
				return fmt.Errorf("series.csv: logged_in %q", r[col["logged_in"]])
			}
			ts, err := strconv.ParseFloat(r[col["t_s"]], 64)
			if err != nil {
				return fmt.Errorf("series.csv: t_s %q", r[col["t_s"]])
			}
			n++
			maxIn = max(maxIn, in)
			if h.AtS != nil && math.Abs(ts-*h.AtS) < 1e-6 {
				brokeRow = in
			}
		}
		// Every sample has the fleet's figures: the shards answer from
		// before the start, so no scrape a verdict reads is empty.
		c.check(n > 0 && empty == 0, "%s: %d samples in series.csv with the fleet's logged-in count (%d without: its scrape failed)", sc.Scenario, n, empty)
		c.check(h.Held != nil && *h.Held <= maxIn && *h.Held <= float64(h.Requested),
			"%s: held %s of %d requested, at most the %.0f series.csv saw logged in", sc.Scenario, num(h.Held), h.Requested, maxIn)
		if h.BrokeAt != nil {
			c.check(brokeRow == *h.BrokeAt, "%s: broke at %s users at %s s, series.csv's row there: %v logged in", sc.Scenario, num(h.BrokeAt), num(h.AtS), brokeRow)
		}
		if cp := sum.Capacity; cp != nil && cp.Scenario == sc.Scenario {
			c.check(cp.Held != nil && *cp.Held <= maxIn && *cp.Held <= float64(cp.Requested),
				"%s: the capacity search held %s of %d requested, at most the %.0f series.csv saw logged in", sc.Scenario, num(cp.Held), cp.Requested, maxIn)
			if cp.BrokeAt != nil && *cp.BrokeAt > 0 { // 0: nothing broke
				c.check(*cp.BrokeAt <= maxIn, "%s: broke at the level of %s users, which series.csv reached (%.0f logged in at most)", sc.Scenario, num(cp.BrokeAt), maxIn)
			}
			h.Held = cp.Held // the headline's number
		}
		if h.Held != nil {
			// A host busy with other work where the answer was decided
			// gives no number ("held ?"; the headline's first scenario
			// "held ? users"), and says why.
			c.check(strings.Contains(sum.Headline, fmt.Sprintf("held %.0f", *h.Held)) || strings.Contains(sum.Headline, fmt.Sprintf("held ≥ %.0f", *h.Held)) ||
				strings.Contains(sum.Headline, sc.Scenario+" held ? (could not judge: ") ||
				strings.Contains(sum.Headline, sc.Scenario+" held ? users (could not judge: "),
				"%s: the report's headline says held %.0f: %q", sc.Scenario, *h.Held, sum.Headline)
		}
	}
	// Logins were read: the plateau and login failures were judged, as in
	// a local run (a fleet with no baseline left them "not judged").
	var unjudged []string
	notJudged(json.RawMessage(b), &unjudged)
	for _, o := range []string{"plateau", "login failures"} {
		c.check(!slices.Contains(unjudged, o), "%s judged (not judged: %s)", o, strings.Join(unjudged, ", "))
	}
	if fleetDesc != "" {
		got := ""
		for _, p := range sum.Params {
			if p.Name == "fleet" {
				got = p.Value
			}
		}
		c.check(strings.Contains(got, fleetDesc), "the fleet ran as %q (want %q)", got, fleetDesc)
	}
	return c.err()
}

// notJudged appends the objectives of every coverage's not_judged in a
// summary.json (a comparison's scenarios', a capacity search's).
func notJudged(raw json.RawMessage, out *[]string) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		for k, v := range obj {
			if k != "not_judged" {
				notJudged(v, out)
				continue
			}
			var us []struct {
				Objective string `json:"objective"`
			}
			if json.Unmarshal(v, &us) == nil {
				for _, u := range us {
					*out = append(*out, u.Objective)
				}
			}
		}
		return
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		for _, v := range arr {
			notJudged(v, out)
		}
	}
}

func num(f *float64) string {
	if f == nil {
		return "none"
	}
	return strconv.FormatFloat(*f, 'f', -1, 64)
}
