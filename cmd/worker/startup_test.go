package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// freeAddr is an address of 127.0.0.1 where nothing listens.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start-up says which dependency it cannot reach and why, after trying for
// --startup-timeout; and it waits for one that comes up in that time.
func TestStartupNamesTheAddress(t *testing.T) {
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	kafka := freeAddr(t)
	out, err := e.cmd(t, "run", "--brokers", kafka, "--startup-timeout", "2s")
	if want := "Kafka broker " + kafka + ": connect: connection refused (still failing after --startup-timeout 2s)"; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(out, "start-up check failed") {
		t.Errorf("Kafka away: %v, want %q and a log line per attempt\n%s", err, want, out)
	}

	bt := freeAddr(t)
	t.Setenv("BIGTABLE_EMULATOR_HOST", bt)
	_, err = e.cmd(t, "run", "--startup-timeout", "2s")
	if want := "Bigtable emulator at " + bt + ": connect: connection refused"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Bigtable away: %v, want %q", err, want)
	}

	// The emulator comes up two seconds after the worker starts.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, e.args("run", "--startup-timeout", "30s"), logs, logs) }()
	time.Sleep(2 * time.Second)
	srv, err := inproc.StartBigtable(inproc.BigtableOptions{Addr: bt})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup on the late emulator: %v\n%s", err, out)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("the worker gave up: %v", err)
		default:
		}
		return strings.Contains(logs.String(), "worker started"), fmt.Sprintf("not started yet:\n%s", logs.String())
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("stop: %v", err)
	}
}

// A worker started before its setup (Flux applies the setup Job and the
// Deployment at once) waits for the table, saying so, and starts once
// setup has made it; without a setup it gives up after --startup-timeout,
// naming the table and the command.
func TestStartupWaitsForSetup(t *testing.T) {
	e := newEnv(t, tenantsYAML)
	_, err := e.cmd(t, "run", "--startup-timeout", "2s")
	if want := fmt.Sprintf("table %q does not exist; run worker setup (waiting for it) (still failing after --startup-timeout 2s)", e.table); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("no setup: %v, want %q", err, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, e.args("run", "--startup-timeout", "30s"), logs, logs) }()
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "waiting for it"), "no word of the wait yet:\n" + logs.String()
	})
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("the worker gave up: %v", err)
		default:
		}
		return strings.Contains(logs.String(), "worker started"), fmt.Sprintf("not started yet:\n%s", logs.String())
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("stop: %v", err)
	}
}
