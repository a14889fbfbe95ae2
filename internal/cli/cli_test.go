package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestCode(t *testing.T) {
	errBad := errors.New("bad config")
	tests := []struct {
		name  string
		err   error
		usage []error
		want  int
	}{
		{"nil", nil, nil, ExitOK},
		{"failure", errors.New("dial: refused"), nil, ExitFailure},
		{"usage", UsageError{errors.New("unknown flag")}, nil, ExitUsage},
		{"wrapped usage", fmt.Errorf("replay: %w", UsageError{errors.New("x")}), nil, ExitUsage},
		{"usage sentinel", fmt.Errorf("fleet: %w", errBad), []error{errBad}, ExitUsage},
		{"sentinel not given", fmt.Errorf("fleet: %w", errBad), nil, ExitFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Code(tt.err, tt.usage...); got != tt.want {
				t.Errorf("Code(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// TestMainPrintsOneLine: an error is one "name: error" line and its code.
func TestMainPrintsOneLine(t *testing.T) {
	var stderr bytes.Buffer
	code := main("record", "", &stderr, func(context.Context) error {
		return UsageError{errors.New("say what to do")}
	})
	if code != ExitUsage || stderr.String() != "record: say what to do\n" {
		t.Errorf("code %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := main("relay", "", &stderr, func(context.Context) error { return nil }); code != ExitOK || stderr.Len() != 0 {
		t.Errorf("ok run: code %d, stderr %q", code, stderr.String())
	}
}
