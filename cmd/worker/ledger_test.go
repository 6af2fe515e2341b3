package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/sink"
)

// A lost ledger never becomes an empty one by accident: with the ledger
// table gone from a table that holds events, audit fails and says why,
// setup refuses to create a new ledger and names the flag that does, and
// with that flag it creates one and its output warns that the erasures
// recorded before are lost and what to do.
func TestLedgerIsNeverSilentlyReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	seedRows(t, e, tenantsYAML, "acme", 3)
	ledger := e.table + "-erasures"
	if err := e.ac.DeleteTable(context.Background(), ledger); err != nil {
		t.Fatal(err)
	}

	out, err := e.cmd(t, "audit")
	if codeOf(err) != 1 || !strings.Contains(err.Error(), "does not exist") ||
		!strings.Contains(err.Error(), "--new-erasure-ledger") || !strings.Contains(err.Error(), "holds events") {
		t.Errorf("audit without a ledger: %v\n%s", err, out)
	}

	out, err = e.cmd(t, "setup")
	if err == nil || !strings.Contains(err.Error(), "--new-erasure-ledger") || !strings.Contains(err.Error(), "holds events") {
		t.Errorf("setup over a table with events and no ledger: %v\n%s", err, out)
	}
	fam, ferr := sink.ReadFamily(context.Background(), e.ac, sink.Target{Table: ledger, Family: erasure.Family})
	if ferr != nil || fam.TableExists {
		t.Fatalf("setup created the ledger it refused: %v %+v", ferr, fam)
	}

	out, err = e.cmd(t, "setup", "--new-erasure-ledger")
	flat := strings.Join(strings.Fields(out), " ")
	if err != nil || !strings.Contains(flat, "created erasure ledger") || !strings.Contains(flat, "every erasure recorded before is lost") ||
		!strings.Contains(flat, "worker forget") {
		t.Errorf("setup --new-erasure-ledger: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "audit"); err != nil {
		t.Errorf("audit with the new ledger: %v\n%s", err, out)
	}
	// A ledger that is there is left alone, flag or not.
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, "already has GC rule") {
		t.Errorf("setup again: %v\n%s", err, out)
	}
}

// On a table without events there is nothing a lost ledger could let
// back: setup creates the ledger without the flag.
func TestSetupCreatesLedgerOverEmptyTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	if err := e.ac.DeleteTable(context.Background(), e.table+"-erasures"); err != nil {
		t.Fatal(err)
	}
	out, err := e.cmd(t, "setup")
	if err != nil || !strings.Contains(out, "created erasure ledger") || strings.Contains(out, "lost") {
		t.Errorf("setup of the ledger beside an empty table: %v\n%s", err, out)
	}
}

// The missing-ledger error every command prints says what setup will and
// will not do, and the flag with its consequence.
func TestMissingLedgerErrorSaysWhatToDo(t *testing.T) {
	t.Parallel()
	msg := erasure.ErrMissing.Error()
	for _, want := range []string{"does not exist", "worker setup", "holds events", "--new-erasure-ledger", "lost", "worker forget"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ErrMissing does not say %q: %s", want, msg)
		}
	}
}

// The guard looks for events in every family of the table: setup run
// with another --family (a new family for a new layout) over a table
// whose events sit in the old one still refuses to make an empty ledger.
func TestLedgerGuardSeesEveryFamily(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	seedRows(t, e, tenantsYAML, "acme", 3)
	if err := e.ac.DeleteTable(context.Background(), e.table+"-erasures"); err != nil {
		t.Fatal(err)
	}
	out, err := e.cmd(t, "setup", "--family", "d")
	if err == nil || !strings.Contains(err.Error(), "--new-erasure-ledger") {
		t.Errorf("setup --family d over events in family c, without a ledger: %v\n%s", err, out)
	}
}

// A ledger written by a release before the expiry index (record and
// journal rows, no index row, no marker) is obeyed by a worker starting on
// it, which reads every record and says so; worker setup indexes it once
// and says how many records, and a worker starting after reads them from
// the index. Setup again indexes nothing.
func TestSetupIndexesALedgerOfAnEarlierRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	ctx := context.Background()
	ledger := e.dc.Open(e.table + "-erasures")
	del := bigtable.NewMutation()
	del.DeleteRow()
	if err := ledger.Apply(ctx, "#m#indexed", del); err != nil {
		t.Fatal(err)
	}
	// The rows the earlier release's forget wrote for acme's u-1.
	now := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Millisecond)
	ts := bigtable.Time(now.Add(24 * time.Hour))
	be := func(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixMilli())) }
	at := fmt.Sprintf(".%013d", now.UnixMilli())
	rec, jr := bigtable.NewMutation(), bigtable.NewMutation()
	rec.Set(erasure.Family, "up_to"+at, ts, be(now))
	rec.Set(erasure.Family, "recorded_at"+at, ts, be(now))
	rec.Set(erasure.Family, "requested_by"+at, ts, []byte("ticket-1"))
	jr.Set(erasure.Family, "up_to", ts, be(now))
	if errs, err := ledger.ApplyBulk(ctx, []string{"acme#u-1", "#j#" + at[1:] + "#acme#u-1"}, []*bigtable.Mutation{rec, jr}); err != nil || errs != nil {
		t.Fatal(err, errs)
	}
	start := func() erasure.Status {
		w := erasure.NewWatch(erasure.NewStore(e.dc, e.table+"-erasures"), time.Second, slog.New(slog.DiscardHandler))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if !w.Current().Erased("acme", "u-1", now.UnixMilli(), erasure.Position{}) {
			t.Error("the earlier release's record is not obeyed")
		}
		return w.Status()
	}
	if st := start(); st.Indexed || !strings.Contains(st.LastRead, "every record") {
		t.Errorf("a start before the index: %+v", st)
	}
	out, err := e.cmd(t, "setup")
	if err != nil || !strings.Contains(out, "indexed erasure ledger") || !strings.Contains(out, ": 1 records in force") {
		t.Errorf("setup over the earlier release's ledger: %v\n%s", err, out)
	}
	if st := start(); !st.Indexed || st.LastRead != "records in force (expiry index): 1 records" {
		t.Errorf("a start after the index: %+v", st)
	}
	if out, err := e.cmd(t, "setup"); err != nil || strings.Contains(out, "indexed") {
		t.Errorf("setup again: %v\n%s", err, out)
	}
}
