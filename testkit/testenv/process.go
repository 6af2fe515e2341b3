package testenv

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cellttl/cellttl/testkit/lab"
)

// Buffer is a bytes.Buffer that a process's output and a test may share.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count is the number of lines that hold sub: a promise to log a thing
// once is as testable as any other.
func (s *Buffer) Count(sub string) int {
	n := 0
	for line := range strings.Lines(s.String()) {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}

var scratch struct {
	sync.Mutex
	dirs []string
}

// ScratchDir makes a temporary directory that lives as long as the test
// binary, for what its tests build once and share (a worker binary: 70 MB
// each). Main removes it when the tests end; t.TempDir would remove it with
// the first test, and os.MkdirTemp alone leaves it behind on every run.
func ScratchDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	scratch.Lock()
	defer scratch.Unlock()
	scratch.dirs = append(scratch.dirs, dir)
	return dir, nil
}

func removeScratch() {
	scratch.Lock()
	defer scratch.Unlock()
	for _, dir := range scratch.dirs {
		os.RemoveAll(dir)
	}
	scratch.dirs = nil
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// WorkerBinary builds cmd/worker once per test binary, for tests that need a
// real process to kill.
func WorkerBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("TESTENV_WORKER_BIN"); bin != "" {
		// Another build, to compare: the fault suite against an earlier one.
		t.Logf("worker binary: %s (TESTENV_WORKER_BIN)", bin)
		return bin
	}
	buildOnce.Do(func() {
		dir, err := ScratchDir("cellttl-worker")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = lab.Build(context.Background(), dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}
