package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// forget tells a typo from an erasure: a user without a row gets no
// record and exit status 3 (the others of the run are erased), unless
// --allow-empty; --requested-by is required; ids come one per line from
// --users-from, and a bad one is named by its line, not its value.
func TestForgetWithoutRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, _ := e.startWorker(t)
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-1", TenantID: "acme", UserID: "u-1"}.bytes())
	// A record its producer stamped an hour ahead: its time is past any
	// erased_up_to of now, and its row goes all the same.
	testenv.ProduceMessages(t, e.brokers, e.topic, kafka.Message{Value: click{EventID: "e-2", TenantID: "acme", UserID: "u-1"}.bytes(), Time: time.Now().Add(time.Hour)})
	e.waitRows(t, 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1"); codeOf(err) != 2 || !strings.Contains(err.Error(), "--requested-by") {
		t.Errorf("forget without --requested-by: exit %d, %v", codeOf(err), err)
	}
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("# erasures of ticket 9\nu-1\n\nu-typo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := e.cmd(t, "forget", "--tenant", "acme", "--users-from", users, "--requested-by", "ticket-9", "--second-pass-after", "10ms")
	if codeOf(err) != exitNothingFound || !strings.Contains(out, "u-1: rows deleted per pass [2 0]") || !strings.Contains(out, "u-typo: no row, nothing recorded") {
		t.Errorf("forget of a user and a typo: exit %d\n%s", codeOf(err), out)
	}
	if n := len(e.rows(t)); n != 0 {
		t.Errorf("%d rows left after forget", n)
	}
	// Run again (as after an interruption): no row left, but the user is
	// in the ledger, so it is recorded again and both passes run.
	out, err = e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--requested-by", "ticket-9", "--second-pass-after", "10ms")
	if err != nil || !strings.Contains(out, "u-1: rows deleted per pass [0 0]") {
		t.Errorf("forget run again: %v\n%s", err, out)
	}
	if _, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--requested-by", "ticket-9", "--before", "2200-01-01T00:00:00Z"); codeOf(err) != 2 {
		t.Errorf("forget --before in the future: exit %d, %v", codeOf(err), err)
	}
	out, err = e.cmd(t, "forget", "--tenant", "acme", "--user", "u-typo", "--requested-by", "ticket-9", "--second-pass-after", "10ms", "--allow-empty")
	if err != nil || !strings.Contains(out, "u-typo: rows deleted per pass [0 0]") {
		t.Errorf("forget --allow-empty: %v\n%s", err, out)
	}
	if err := os.WriteFile(users, []byte("u-1\nsecret#7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.cmd(t, "forget", "--tenant", "acme", "--users-from", users, "--requested-by", "ticket-9")
	if codeOf(err) != 2 || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "secret") {
		t.Errorf("a bad id in --users-from: exit %d, %v", codeOf(err), err)
	}
}

// logLines keeps the lines of out that hold s.
func logLines(out, s string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
