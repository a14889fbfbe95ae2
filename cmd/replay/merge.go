package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/fleet"
)

func init() { subcommands = append(subcommands, newMergeCmd) }

// newMergeCmd is `replay merge`: one summary from the shards' summaries.
func newMergeCmd(st *state) *cobra.Command {
	var out string
	var maxLoss float64
	cmd := &cobra.Command{
		Use:           "merge SHARD.json...",
		Short:         "merge the --summary files of a fleet's shards into one summary (exact percentiles from their histograms)",
		Example:       `  replay merge out/shard-*.json --summary out/merged.json`,
		Args:          cobra.MinimumNArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, paths []string) error {
			sums := make([]fleet.Summary, 0, len(paths))
			for _, p := range paths {
				s, err := loadSummary(p)
				if err != nil {
					return err
				}
				sums = append(sums, s)
			}
			m, err := fleet.Merge(sums)
			if errors.Is(err, fleet.ErrMerge) {
				return usageError(err)
			}
			if err != nil {
				return err
			}
			verdict := m.Check(maxLoss)
			if err := m.WriteText(st.stdout); err != nil {
				return err
			}
			if err := writeAnswer(st.stdout, m, maxLoss, verdict); err != nil {
				return err
			}
			if out != "" {
				if err := writeFile(out, m.WriteJSON); err != nil {
					return err
				}
			}
			return verdict
		},
	}
	cmd.Flags().StringVar(&out, "summary", "", "also write the merged summary as JSON to this file")
	addMaxLossFlag(cmd.Flags(), &maxLoss)
	return cmd
}

// loadSummary reads a --summary file, or a log holding a `--summary -`
// line among other output (a shard pod's `kubectl logs`): then the last
// line that is a summary counts.
func loadSummary(path string) (fleet.Summary, error) {
	var s fleet.Summary
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("read summary: %w", err)
	}
	jerr := json.Unmarshal(b, &s)
	if jerr == nil {
		return s, nil
	}
	lines := bytes.Split(b, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); bytes.HasPrefix(l, []byte(`{"clients_requested"`)) && json.Unmarshal(l, &s) == nil {
			return s, nil
		}
	}
	return s, usageError(fmt.Errorf("%s: not a replay summary, nor a log with one: %v", path, jerr))
}
