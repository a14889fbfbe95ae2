package cli

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LogFormat is how a command's log lines look.
type LogFormat int

// Log formats: JSON lines for a server's log a machine reads (the relay),
// console lines for a person at a terminal (replay).
const (
	LogJSON LogFormat = iota
	LogConsole
)

// NewLogger is a command's logger at level (--log-level: debug, info,
// warn or error), writing to w: the one constructor of every command.
func NewLogger(level string, w io.Writer, format LogFormat) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	if format == LogConsole {
		enc = zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}
