package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/redrive"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// worker redrive reads the letters it is told to: a partition, an offset
// range ([from, to)), the reasons named; letters whose event has expired
// since are counted and never written, whatever the selection.
func TestRedriveSelection(t *testing.T) {
	e, _, letters, flags := redriveLetters(t)
	where := func(keep func(m kafka.Message) bool) []kafka.Message {
		var out []kafka.Message
		for _, m := range letters {
			if keep(m) {
				out = append(out, m)
			}
		}
		return out
	}
	for _, tt := range []struct {
		args []string
		want []kafka.Message
	}{
		{nil, letters},
		{[]string{"--partition", "1"}, where(func(m kafka.Message) bool { return m.Partition == 1 })},
		{[]string{"--partition", "0", "--from-offset", "2"}, where(func(m kafka.Message) bool { return m.Partition == 0 && m.Offset >= 2 })},
		{[]string{"--from-offset", "1", "--to-offset", "4"}, where(func(m kafka.Message) bool { return m.Offset >= 1 && m.Offset < 4 })},
		{[]string{"--reason", "not_json"}, where(func(m kafka.Message) bool { return strings.HasPrefix(string(m.Value), "not json") })},
		{[]string{"--reason", "unlisted_tenant", "--partition", "1", "--to-offset", "3"},
			where(func(m kafka.Message) bool {
				return !strings.HasPrefix(string(m.Value), "not json") && m.Partition == 1 && m.Offset < 3
			})},
	} {
		if len(tt.args) > 0 && (len(tt.want) == 0 || len(tt.want) == len(letters)) {
			t.Fatalf("redrive %v: the letters' layout makes it select %d of %d", tt.args, len(tt.want), len(letters))
		}
		rep, err := redriveJSON(context.Background(), t, e, append(flags, tt.args...)...)
		if want := expectRedrive(tt.want); err != nil || !reflect.DeepEqual(rep, want) {
			t.Errorf("redrive %v: %v\n got %+v\nwant %+v", tt.args, err, rep, want)
		}
	}
	if ids := newcoRows(t, e); len(ids) != 0 {
		t.Fatalf("dry runs wrote %v", ids)
	}

	// Applied to a range, it writes the range's recent events only.
	part := where(func(m kafka.Message) bool { return m.Partition == 1 && m.Offset >= 1 && m.Offset < 5 })
	if _, err := redriveJSON(context.Background(), t, e, append(flags, "--apply", "--trust-unsigned-letters", "--partition", "1", "--from-offset", "1", "--to-offset", "5")...); err != nil {
		t.Fatal(err)
	}
	if got, want := newcoRows(t, e), freshIDs(part); !slices.Equal(got, want) {
		t.Errorf("rows after a redrive of partition 1 [1, 5): %v, want %v", got, want)
	}
	// Applied to everything: every recent event, none of the expired.
	rep, err := redriveJSON(context.Background(), t, e, append(flags, "--apply", "--trust-unsigned-letters")...)
	if want := expectRedrive(letters); err != nil || rep.Outcomes[redrive.Expired] != 2 || rep.Outcomes[redrive.Written] != want.Outcomes[redrive.Written] {
		t.Errorf("redrive --apply: %v: %+v, want %+v", err, rep, want)
	}
	if got, want := newcoRows(t, e), freshIDs(letters); !slices.Equal(got, want) {
		t.Errorf("rows after a redrive of everything: %v, want %v", got, want)
	}
}

// A redrive interrupted mid-way (its context ends while it writes the
// second partition's letters) leaves a checkpoint at the end of the first;
// run again with it, it reads the second partition only, and the table
// ends with every recent event once.
func TestRedriveResumesAfterInterruption(t *testing.T) {
	e, proxy, letters, flags := redriveLetters(t)
	cp := filepath.Join(t.TempDir(), "redrive.checkpoint")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		if calls.Add(1) < 2 {
			return testenv.MutateRowsFault{}
		}
		cancel()
		return testenv.MutateRowsFault{Refuse: status.Error(codes.Unavailable, "interrupted by the test")}
	})
	if _, err := redriveJSON(ctx, t, e, append(flags, "--apply", "--trust-unsigned-letters", "--checkpoint", cp)...); err == nil {
		t.Fatal("redrive interrupted mid-way: no error")
	}
	proxy.SetFault(nil)
	byPart := map[int][]kafka.Message{}
	for _, m := range letters {
		byPart[m.Partition] = append(byPart[m.Partition], m)
	}
	data, err := os.ReadFile(cp)
	var saved struct{ Next map[string]int64 }
	if err == nil {
		err = json.Unmarshal(data, &saved)
	}
	if first := e.topic + ".letters/0"; err != nil || len(saved.Next) != 1 || saved.Next[first] != int64(len(byPart[0])) {
		t.Fatalf("checkpoint of the interrupted run (%v): %s; want %s at %d", err, data, first, len(byPart[0]))
	}
	if got, want := newcoRows(t, e), freshIDs(byPart[0]); !slices.Equal(got, want) {
		t.Fatalf("rows after the interrupted run: %v, want partition 0's %v", got, want)
	}
	rep, err := redriveJSON(context.Background(), t, e, append(flags, "--apply", "--trust-unsigned-letters", "--checkpoint", cp)...)
	if want := expectRedrive(byPart[1]); err != nil || !reflect.DeepEqual(rep, redrive.Report{Letters: want.Letters, ByReason: want.ByReason, Outcomes: want.Outcomes, Applied: true}) {
		t.Errorf("resumed: %v\n got %+v\nwant partition 1's %+v", err, rep, want)
	}
	if got, want := newcoRows(t, e), freshIDs(letters); !slices.Equal(got, want) {
		t.Errorf("rows after the resumed run: %v, want %v", got, want)
	}
}

// A redrive is a job that must end: when Bigtable refuses its writes as a
// whole (here PermissionDenied on every MutateRows), it stops with an error
// after four attempts' time instead of retrying as long as a worker would,
// and a run after the refusal ends writes the letter.
func TestRedriveEndsWhenBigtableRefusesEveryWrite(t *testing.T) {
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	e := newEnv(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, _ := e.startWorker(t)
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "n-1", TenantID: "newco", UserID: "u-1"}.bytes())
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.writeTenants(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n  newco: 3h\n")
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		return testenv.MutateRowsFault{Refuse: status.Error(codes.PermissionDenied, "missing bigtable.tables.mutateRows")}
	})
	args := []string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic, "--apply", "--trust-unsigned-letters", "--write-timeout", "250ms"}
	start := time.Now()
	_, err := e.cmd(t, "redrive", args...)
	if err == nil || !strings.Contains(err.Error(), "not written within 1s") {
		t.Fatalf("redrive with every write refused: %v, want it to stop on the bound", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("redrive took %s to give up", took)
	}
	if n := len(e.rows(t)); n != 0 {
		t.Fatalf("%d rows written through a refusing Bigtable", n)
	}
	proxy.SetFault(nil)
	if out, err := e.cmd(t, "redrive", args...); err != nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "unlisted_tenant written 1") {
		t.Fatalf("redrive once Bigtable takes writes: %v\n%s", err, out)
	}
}

// A redrive shares the cluster with the workers: the tenants file's
// max_write_rate caps it as one more worker. Ten letters' rows at 2 a
// second (a burst of 2) take 4 s at least, where the same redrive
// uncapped writes them at once; and all ten are written.
func TestRedriveIsCappedByTheWriteRate(t *testing.T) {
	e, _, letters, flags := redriveLetters(t)
	e.writeTenants(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\nrecord_real_timestamp: true\nmax_write_rate: 2\ntenants:\n  acme: 1h\n  newco: 1h\n")
	start := time.Now()
	rep, err := redriveJSON(context.Background(), t, e, append(flags, "--apply", "--trust-unsigned-letters")...)
	took := time.Since(start)
	if err != nil || rep.Outcomes[redrive.Written] != 10 {
		t.Fatalf("redrive at max_write_rate 2: %v: %+v, want 10 written", err, rep)
	}
	if took < 3500*time.Millisecond {
		t.Errorf("10 rows redriven at max_write_rate 2 (a burst of 2) in %s, want 4 s or more", took)
	}
	if got, want := newcoRows(t, e), freshIDs(letters); !slices.Equal(got, want) {
		t.Errorf("rows after a capped redrive: %v, want %v", got, want)
	}
}
