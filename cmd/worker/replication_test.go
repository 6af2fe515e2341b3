package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/rowkey"
)

// worker forget's receipt says what it did about replication. Against the
// emulator, which has one cluster: it answers consistency tokens (always
// consistent), so forget waits, at once; it implements no app profiles, so
// --replication single-cluster cannot check forget's and says so. What the
// emulator cannot show: a second cluster that lags (see the package
// tests of retention/forget, which stand one in).
func TestForgetReceiptSaysReplication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	m := bigtable.NewMutation()
	m.Set("c", "event", bigtable.Now(), []byte("{}"))
	if err := e.dc.Open(e.table).Apply(context.Background(), rowkey.Key("acme", "u-1", "e-1", time.Now().Add(-time.Minute).UnixMilli()), m); err != nil {
		t.Fatal(err)
	}
	out, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--requested-by", "ticket-1", "--second-pass-after", "10ms", "--format", "json")
	var rc struct {
		Users []struct {
			RowsPerPass []int64 `json:"rows_per_pass"`
		}
		Replication struct {
			Waited  bool
			Summary string
		}
	}
	if err != nil || json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &rc) != nil {
		t.Fatalf("forget: %v\n%s", err, out)
	}
	if !rc.Replication.Waited || !strings.HasPrefix(rc.Replication.Summary, "waited for consistency") || len(rc.Users) != 1 || len(rc.Users[0].RowsPerPass) != 2 {
		t.Errorf("receipt: %+v\n%s", rc, out)
	}
	out, err = e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--requested-by", "ticket-1", "--second-pass-after", "10ms", "--replication", "single-cluster")
	if err != nil || !strings.Contains(out, "replication: not checked: --replication single-cluster states") || !strings.Contains(out, "Unimplemented") {
		t.Errorf("forget --replication single-cluster: %v\n%s", err, out)
	}
	if _, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--requested-by", "ticket-1", "--replication", "none"); codeOf(err) != 2 {
		t.Errorf("--replication none: exit %d, %v", codeOf(err), err)
	}
}
