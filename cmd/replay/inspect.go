package main

import (
	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/capture"
)

func init() { subcommands = append(subcommands, newInspectCmd) }

// newInspectCmd is `replay inspect FILE [--json]`: what a capture holds,
// to choose a flow and loop points.
func newInspectCmd(st *state) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:           "inspect FILE",
		Short:         "show a capture's flows, frames by kind, rates, users, rooms and where the login ends",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, args []string) error {
			c, err := capture.ReadFile(args[0], capture.Options{})
			if c == nil {
				return err
			}
			s := capture.Inspect(c)
			if err != nil {
				// Partial capture: show what was read, the break as a warning.
				s.Warnings = append(s.Warnings, err.Error())
			}
			if asJSON {
				return s.WriteJSON(st.stdout)
			}
			return s.WriteText(st.stdout)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON instead of text")
	return cmd
}
