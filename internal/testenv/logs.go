package testenv

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// Logs keeps what a logger writes, for a test to count its lines: a
// promise to log a thing once is as testable as any other.
type Logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// NewLogs returns the logs and a text logger that writes to them.
func NewLogs() (*Logs, *slog.Logger) {
	l := &Logs{}
	return l, slog.New(slog.NewTextHandler(l, nil))
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Count is the number of lines that hold s.
func (l *Logs) Count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line := range strings.Lines(l.b.String()) {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}
