package telemetry

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/cellttl/cellttl/internal/envflag"
)

// LogConfig is the format and level of the worker's log.
type LogConfig struct {
	Format string // json or text
	Level  string // debug, info, warn or error
}

// DefaultLogConfig returns the defaults the flags document.
func DefaultLogConfig() LogConfig { return LogConfig{Format: "json", Level: "info"} }

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *LogConfig) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Log")
	// Choices, so that a wrong value stops every command at its start,
	// including those that log nothing before they fail.
	f.Choice(&c.Format, "log-format", "LOG_FORMAT", c.Format, "log format: json or text", "json", "text")
	f.Choice(&c.Level, "log-level", "LOG_LEVEL", c.Level, "log level: debug, info, warn or error", "debug", "info", "warn", "error")
}

// Logger returns a logger writing to w, or an error naming the flag at
// fault.
func (c LogConfig) Logger(w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.Level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch c.Format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", c.Format)
}
