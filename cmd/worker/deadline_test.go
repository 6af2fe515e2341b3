package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// silentTCP is an address that takes connections and never answers: a
// firewall's hole, a pod that listens before it serves, a process stopped.
func silentTCP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return l.Addr().String()
}

// silentGRPC is a gRPC server that completes the HTTP/2 handshake and
// holds every call without an answer: gRPC's connection is ready, and the
// call is what waits.
func silentGRPC(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		<-ss.Context().Done()
		return ss.Context().Err()
	}))
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return l.Addr().String()
}

// deadlineMargin is how long past its --service-timeout a command may take
// to end: the watch's tick, closing the clients, a process's start.
const deadlineMargin = 8 * time.Second

// runWorker runs the worker binary with args and env added to the test's,
// and returns its exit status, output and how long it ran; one still
// running at timeout + deadlineMargin is killed, and fails the test.
func runWorker(t *testing.T, timeout time.Duration, env []string, args ...string) (code int, out string, took time.Duration) {
	t.Helper()
	bin := testenv.WorkerBinary(t) // built once, before the clock starts
	ctx, cancel := context.WithTimeout(context.Background(), timeout+deadlineMargin)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	b, err := cmd.CombinedOutput()
	took = time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("worker %s: still running after %s, killed; it said:\n%s", args[0], took.Round(time.Second), b)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, string(b), took
}

// bigtableCommands are the commands that reach Bigtable, each with the
// flags it needs, and the exit status of a wait that ran out.
func bigtableCommands(tenantsFile string) map[string]struct {
	args []string
	exit int
} {
	kafka := []string{"--brokers", "127.0.0.1:1"} // never reached: Bigtable comes first
	type c = struct {
		args []string
		exit int
	}
	return map[string]c{
		"setup":     {nil, exitNoAnswer},
		"check":     {nil, checkUnchecked},
		"read":      {[]string{"--tenant", "acme"}, exitNoAnswer},
		"audit":     {nil, exitNoAnswer},
		"retime":    {[]string{"--tenant", "acme"}, exitNoAnswer},
		"migrate":   {[]string{"--against", tenantsFile}, exitNoAnswer},
		"retention": {kafka, exitNoAnswer},
		"redrive":   {kafka, exitNoAnswer},
		"forget":    {append([]string{"--tenant", "acme", "--user", "u-1", "--requested-by", "test"}, kafka...), exitNoAnswer},
		"offboard":  {append([]string{"--tenant", "acme", "--requested-by", "test"}, kafka...), exitNoAnswer},
	}
}

// Every command that reaches Bigtable ends within its --service-timeout
// when Bigtable takes the connection and never answers, at the TCP level
// and at gRPC's, with the exit status of a service that did not answer,
// naming what it waited for, where and how long, and saying it meanwhile.
func TestEveryCommandEndsWhenBigtableDoesNotAnswer(t *testing.T) {
	t.Parallel()
	tenantsFile := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(tenantsFile, []byte(tenantsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	const timeout = 2 * time.Second
	for kind, addr := range map[string]string{"tcp": silentTCP(t), "http2": silentGRPC(t)} {
		for name, c := range bigtableCommands(tenantsFile) {
			t.Run(kind+"/"+name, func(t *testing.T) {
				t.Parallel()
				args := append([]string{name, "--tenants", tenantsFile, "--service-timeout", timeout.String()}, c.args...)
				code, out, took := runWorker(t, timeout, []string{"BIGTABLE_EMULATOR_HOST=" + addr}, args...)
				want := "waited 2s for Bigtable emulator at " + addr + " ("
				if code != c.exit || took > timeout+deadlineMargin || !strings.Contains(out, want) || !strings.Contains(out, "without an answer (--service-timeout 2s)") {
					t.Fatalf("exit %d after %s, want %d within %s and %q...; it said:\n%s", code, took.Round(time.Millisecond), c.exit, timeout+deadlineMargin, want, out)
				}
				if !strings.Contains(out, `"msg":"waiting for an answer","from":"Bigtable emulator at `+addr+`"`) {
					t.Errorf("no line said the wait meanwhile:\n%s", out)
				}
				t.Logf("exit %d after %s: %s", code, took.Round(time.Millisecond), lastLine(out))
			})
		}
	}
}

// lastLine is what a command said last.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
