package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// retime racing a worker that writes the same tenant: the file is edited
// and retime starts at once, while the worker is still writing under the
// old file and events keep coming; when retime is done and the worker has
// caught up, every cell follows the new file.
func TestRetimeRacingAWorker(t *testing.T) {
	t.Parallel()
	longer := strings.Replace(tenantsYAML, "acme: 1h", "acme: 3h", 1)
	e := newEnv(t, longer)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--tenants-reload-interval", "200ms")
	producing := make(chan struct{})
	var produced atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-producing:
				return
			default:
			}
			var batch [][]byte
			for j := range 20 {
				batch = append(batch, click{EventID: fmt.Sprintf("r-%d-%d", i, j), TenantID: "acme", UserID: fmt.Sprintf("u%d", j)}.bytes())
			}
			testenv.Produce(t, e.brokers, e.topic, batch...)
			produced.Add(int64(len(batch)))
			time.Sleep(50 * time.Millisecond)
		}
	})
	e.waitRows(t, 200, 30*time.Second)
	e.writeTenants(t, tenantsYAML) // acme 3h -> 1h, and retime at once
	out, err := e.cmd(t, "retime", "--tenant", "acme", "--passes", "4", "--pass-delay", "2s")
	if err != nil {
		t.Fatalf("retime: %v\n%s", err, out)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "tenants file reloaded"), "the worker has not reloaded the file"
	})
	close(producing)
	wg.Wait()
	e.waitRows(t, int(produced.Load()), 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if audit, err := e.cmd(t, "audit", "--tenant", "acme"); err != nil {
		t.Errorf("audit after retime raced the worker: exit %d\n%s\nretime said:\n%s", codeOf(err), audit, out)
	}
	t.Logf("%d events; retime:\n%s", produced.Load(), out)
}

// retime and migrate declare their shared flags once and check them the
// same way: migrate accepted a negative --rows-per-second.
func TestSharedRetentionFlags(t *testing.T) {
	t.Parallel()
	old := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(old, []byte(tenantsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	for args, want := range map[*[]string]string{
		{"retime", "--tenant", "acme", "--rows-per-second", "-1"}: "--rows-per-second -1: must not be negative",
		{"migrate", "--against", old, "--rows-per-second", "-1"}:  "--rows-per-second -1: must not be negative",
		{"retime", "--tenant", "acme", "--resume"}:                "--resume needs --checkpoint",
		{"migrate", "--against", old, "--resume"}:                 "--resume needs --checkpoint",
		{"migrate", "--against", old, "--shard", "3/2"}:           `--shard "3/2"`,
	} {
		var out bytes.Buffer
		err := run(context.Background(), *args, &out, &out)
		if code := exitCode(err, &out); code != 2 || !strings.Contains(out.String(), want) {
			t.Errorf("%v: exit %d, %v\n%s\nwant exit 2 and %q", *args, code, err, out.String(), want)
		}
	}
}
