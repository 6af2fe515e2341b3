package lab

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The kit imports no feature package of cellttl: the tests and the load
// test that use it measure the worker from outside.
func TestImportsNoFeaturePackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/cellttl/cellttl/") && !strings.HasPrefix(dep, "github.com/cellttl/cellttl/internal/") &&
			!strings.HasPrefix(dep, "github.com/cellttl/cellttl/testkit/") {
			t.Errorf("lab depends on %s", dep)
		}
	}
}

// A stand-in for the worker: a shell that takes the flags Start adds as
// its arguments, and does as script says on SIGTERM.
func shell(t *testing.T, script string) *Process {
	t.Helper()
	p, err := Start(Options{Bin: "/bin/sh", Args: []string{"-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	time.Sleep(200 * time.Millisecond) // the trap is set
	return p
}

func TestStopDrainsOrKills(t *testing.T) {
	clean := shell(t, `trap 'exit 0' TERM; while :; do sleep 0.05; done`)
	if !strings.HasPrefix(clean.Admin, "http://127.0.0.1:") {
		t.Errorf("admin %q", clean.Admin)
	}
	if clean.State() != nil {
		t.Error("a running process has an exit state")
	}
	if err := clean.Stop(10 * time.Second); err != nil || clean.Killed() {
		t.Errorf("SIGTERM honoured: %v (killed %v), want exit 0", err, clean.Killed())
	}
	stubborn := shell(t, `trap '' TERM; while :; do sleep 0.05; done`)
	if err := stubborn.Stop(200 * time.Millisecond); err == nil || !stubborn.Killed() {
		t.Errorf("SIGTERM ignored: %v (killed %v), want SIGKILL after the grace", err, stubborn.Killed())
	}
	if cpu, err := stubborn.CPU(); err != nil || cpu < 0 {
		t.Errorf("CPU of an exited process: %v, %v", cpu, err)
	}
}

func TestProc(t *testing.T) {
	// Spend some CPU: the reading is in ticks of 10 ms.
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	if cpu, err := CPU(os.Getpid()); err != nil || cpu <= 0 || cpu%(10*time.Millisecond) != 0 {
		t.Errorf("CPU: %v, %v: want whole ticks of 10 ms", cpu, err)
	}
	if rss, peak, own, err := Memory(os.Getpid()); err != nil || rss <= 0 || peak < rss || own <= 0 || own >= rss {
		t.Errorf("Memory: rss %d, peak %d, own %d, %v: want own a part of rss, the binary's pages the rest", rss, peak, own, err)
	}
	if _, err := LoadAverage(); err != nil {
		t.Error(err)
	}
	if busy, total, err := Cores(); err != nil || busy <= 0 || total < busy {
		t.Errorf("Cores: busy %v of %v, %v", busy, total, err)
	}
	if _, err := CPU(1 << 30); err == nil {
		t.Error("CPU of no process: no error")
	}
}
