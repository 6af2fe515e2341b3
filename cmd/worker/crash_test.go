package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/lab"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// startProcess starts `worker run` as a process, killed with the test.
func (e *env) startProcess(t *testing.T, extra ...string) *lab.Process {
	t.Helper()
	return e.startBinary(t, testenv.WorkerBinary(t), extra...)
}

// startBinary is startProcess of another build of the worker.
func (e *env) startBinary(t *testing.T, bin string, extra ...string) *lab.Process {
	t.Helper()
	logs := &syncBuffer{}
	p, err := lab.Start(lab.Options{Bin: bin, Args: e.args("run", extra...), Log: logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("worker pid %d logs:\n%s", p.Pid(), logs.String())
		}
	})
	return p
}

// A worker SIGKILLed mid-stream, twice, and restarted loses no event and
// writes no cell twice: redelivered events overwrite their own cells.
func TestCrashRestartLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	const n = 20000
	tenants := []string{"acme", "globex", "initech", "hooli"}
	occurred := time.Now().Add(-time.Minute).UTC()
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for chunk := 0; chunk < n; chunk += 1000 {
			values := make([][]byte, 1000)
			for i := range values {
				id := chunk + i
				values[i] = click{EventID: fmt.Sprintf("c-%d", id), TenantID: tenants[id%len(tenants)], UserID: fmt.Sprintf("u-%d", id%97),
					OccurredAt: occurred.Add(time.Duration(id) * time.Millisecond).Format(time.RFC3339Nano)}.bytes()
			}
			testenv.Produce(t, e.brokers, e.topic, values...)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	flags := []string{"--flush-rows", "200", "--commit-interval", "50ms", "--session-timeout", "6s"}
	for kill, at := range []int{n / 5, n / 2} {
		p := e.startProcess(t, flags...)
		e.waitRows(t, at, 60*time.Second)
		p.Kill()
		t.Logf("kill %d: SIGKILLed with %d rows written", kill+1, len(e.rows(t)))
	}
	p := e.startProcess(t, flags...)
	<-produced
	e.waitRows(t, n, 90*time.Second)
	e.waitCommitted(t, 60*time.Second)
	switch err := p.Stop(40 * time.Second); {
	case p.Killed():
		t.Error("SIGTERM: worker did not exit within the drain timeout")
	case err != nil:
		t.Errorf("SIGTERM: worker exited with %v, want 0", err)
	}

	rows := e.rows(t)
	if len(rows) != n {
		t.Errorf("%d rows, want %d", len(rows), n)
	}
	for key, r := range rows {
		cells := cellsOf(r)
		if len(cells["event"]) != 1 || len(cells["written_at"]) != 1 {
			t.Fatalf("row %s: %d event and %d written_at versions, want 1 each", key, len(cells["event"]), len(cells["written_at"]))
		}
		tenant := key[:strings.IndexByte(key, '#')]
		var id int
		fmt.Sscanf(key[strings.LastIndexByte(key, '#')+1:], "c-%d", &id)
		want := wantTimestamp(tenant, occurred.Add(time.Duration(id)*time.Millisecond))
		if got := int64(cells["event"][0].Timestamp); got != want {
			t.Fatalf("row %s: timestamp %d, want %d", key, got, want)
		}
	}
}
