package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/testenv"
)

const tenantsYAML = testenv.TenantsYAML

var ttls = map[string]time.Duration{"acme": time.Hour, "globex": 72 * time.Hour}

const defaultTTL = 48 * time.Hour

// wantTimestamp is the contract, computed independently of the expiry
// package: trunc_ms(base) + (tenant_ttl - default_ttl), in microseconds.
func wantTimestamp(tenant string, base time.Time) int64 {
	ttl, ok := ttls[tenant]
	if !ok {
		ttl = defaultTTL
	}
	return base.UnixMilli()*1000 + (ttl - defaultTTL).Microseconds()
}

type click struct {
	EventID    string `json:"event_id"`
	TenantID   string `json:"tenant_id"`
	UserID     string `json:"user_id,omitempty"`
	OccurredAt string `json:"occurred_at,omitempty"`
	Page       string `json:"page"`
}

func (c click) bytes() []byte {
	b, _ := json.Marshal(c)
	return b
}

func TestEventsLandPerContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	occurred := time.Now().Add(-10 * time.Minute).Truncate(time.Second).Add(123456 * time.Microsecond)
	var values [][]byte
	var sent []click
	for i, tenant := range []string{"acme", "globex", "initech", "acme", "globex", "initech"} {
		c := click{EventID: fmt.Sprintf("e-%d", i), TenantID: tenant, UserID: fmt.Sprintf("u-%d", i%2), OccurredAt: occurred.Format(time.RFC3339Nano), Page: "/p"}
		sent = append(sent, c)
		values = append(values, c.bytes())
	}
	noTime := click{EventID: "e-record-time", TenantID: "globex", Page: "/q"}
	expired := click{EventID: "e-expired", TenantID: "acme", OccurredAt: time.Now().Add(-2 * time.Hour).Format(time.RFC3339Nano)}
	future := click{EventID: "e-future", TenantID: "initech", OccurredAt: time.Now().Add(time.Hour).Format(time.RFC3339Nano)}
	values = append(values, noTime.bytes(), expired.bytes(), future.bytes())

	start := time.Now()
	stop, _ := e.startWorker(t)
	testenv.Produce(t, e.brokers, e.topic, values...)
	rows := e.waitRows(t, len(sent)+2, 30*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
	end := time.Now()

	byEvent := map[string]string{} // event id -> row key
	for key := range rows {
		byEvent[key[strings.LastIndexByte(key, '#')+1:]] = key
	}
	if _, ok := byEvent["e-expired"]; ok {
		t.Error("an event already expired when processed was written")
	}
	if len(rows) != len(sent)+2 {
		t.Errorf("%d rows, want %d", len(rows), len(sent)+2)
	}
	check := func(c click, value []byte, want func(ts int64) bool, wantDesc string) {
		t.Helper()
		key, ok := byEvent[c.EventID]
		if !ok {
			t.Errorf("event %s not written", c.EventID)
			return
		}
		if !strings.HasPrefix(key, c.TenantID+"#") || !strings.HasSuffix(key, "#"+c.EventID) {
			t.Errorf("row key %q: want <tenant>#...#<event_id>", key)
		}
		cells := cellsOf(rows[key])
		ev, wa := cells["event"], cells["written_at"]
		if len(ev) != 1 || len(wa) != 1 {
			t.Fatalf("row %s: %d event and %d written_at cells, want one each", key, len(ev), len(wa))
		}
		if string(ev[0].Value) != string(value) {
			t.Errorf("row %s: event %q, want the message value %q", key, ev[0].Value, value)
		}
		ts := int64(ev[0].Timestamp)
		if !want(ts) || ts%1000 != 0 {
			t.Errorf("row %s: timestamp %d (%s), want %s", key, ts, time.UnixMicro(ts).UTC().Format(time.RFC3339Nano), wantDesc)
		}
		if wa[0].Timestamp != ev[0].Timestamp {
			t.Errorf("row %s: written_at timestamp %d, event %d: they must expire together", key, wa[0].Timestamp, ev[0].Timestamp)
		}
		w := time.UnixMicro(int64(binary.BigEndian.Uint64(wa[0].Value)))
		if len(wa[0].Value) != 8 || w.Before(start) || w.After(end) {
			t.Errorf("row %s: written_at %x (%s) is not the write time", key, wa[0].Value, w)
		}
	}
	for i, c := range sent {
		want := wantTimestamp(c.TenantID, occurred)
		check(c, values[i], func(ts int64) bool { return ts == want }, strconv.FormatInt(want, 10))
	}
	// No occurred_at: the Kafka record timestamp is the base.
	recTime := recordTime(t, e, noTime.EventID)
	wantRec := wantTimestamp("globex", recTime)
	check(noTime, noTime.bytes(), func(ts int64) bool { return ts == wantRec }, "record time + 1d")
	// An occurred_at an hour ahead of its record: the record timestamp.
	wantFuture := wantTimestamp("initech", recordTime(t, e, future.EventID))
	check(future, future.bytes(), func(ts int64) bool { return ts == wantFuture }, "record time")
}

// The same records consumed again, by a second consumer group, a replay or
// after a crash, land in the same rows with the same cells: nothing about
// an event depends on when it is processed, not even a clamped time.
func TestReplayWritesTheSameCells(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	now := time.Now()
	events := []click{
		{EventID: "r-plain", TenantID: "acme", UserID: "u", OccurredAt: now.Add(-time.Minute).Format(time.RFC3339Nano)},
		{EventID: "r-record-time", TenantID: "globex", UserID: "u"},
		{EventID: "r-clamped", TenantID: "initech", UserID: "u", OccurredAt: now.Add(24 * time.Hour).Format(time.RFC3339Nano)},
		{EventID: "r-year-one", TenantID: "globex", UserID: "u", OccurredAt: "0001-01-01T00:00:00Z"},
	}
	var values [][]byte
	for _, c := range events {
		values = append(values, c.bytes())
	}
	testenv.Produce(t, e.brokers, e.topic, values...)
	firstGroup := e.group
	for pass, group := range []string{firstGroup, testenv.Name("replay")} {
		e.group = group
		stop, _ := e.startWorker(t)
		e.waitCommitted(t, 30*time.Second)
		if err := stop(); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		time.Sleep(50 * time.Millisecond) // the second pass runs at a later processing time
	}
	rowsPerEvent := map[string]int{}
	for key, r := range e.rows(t) {
		id := key[strings.LastIndexByte(key, '#')+1:]
		rowsPerEvent[id]++
		for col, cells := range cellsOf(r) {
			if len(cells) != 1 {
				t.Errorf("row %s: %d versions of %s after two passes, want 1", key, len(cells), col)
			}
		}
		if id == "r-clamped" {
			if want := wantTimestamp("initech", recordTime(t, e, id)); int64(r["c"][0].Timestamp) != want {
				t.Errorf("clamped event: timestamp %d, want %d (the record timestamp's)", r["c"][0].Timestamp, want)
			}
		}
	}
	for _, c := range events[:3] {
		if rowsPerEvent[c.EventID] != 1 {
			t.Errorf("event %s: %d rows after two passes, want 1", c.EventID, rowsPerEvent[c.EventID])
		}
	}
	if n := rowsPerEvent["r-year-one"]; n != 0 {
		t.Errorf("an event of year 1 was written (%d rows): it expired long ago", n)
	}
}

// recordTime finds the Kafka record timestamp of the message with the event id.
func recordTime(t *testing.T, e *env, eventID string) time.Time {
	t.Helper()
	for _, m := range testenv.ReadAll(t, e.brokers, e.topic, 1<<20, 20*time.Second) {
		if strings.Contains(string(m.Value), `"`+eventID+`"`) {
			return m.Time
		}
	}
	t.Fatalf("message of %s not found", eventID)
	return time.Time{}
}

func TestBadEventsGoToDeadLetterTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	bad := map[string]string{ // value -> text the reason must contain
		`not json`:                                                 "not a JSON object",
		`{"tenant_id":"acme"}`:                                     "event_id is missing",
		`{"event_id":"e#1","tenant_id":"acme"}`:                    "contains '#'",
		`{"event_id":"e","tenant_id":"acme","user_id":7}`:          "user_id must be a string",
		`{"event_id":"e","tenant_id":"acme","occurred_at":"noon"}`: `occurred_at "noon"`,
		"\x00\xff\xfe binary":                                      "not a JSON object",
		`{"event_id":"big","tenant_id":"acme","pad":"` + strings.Repeat("x", 2000) + `"}`: "more than the limit of 1024",
	}
	var values [][]byte
	good := 0
	for v := range bad {
		values = append(values, []byte(v))
		c := click{EventID: fmt.Sprintf("good-%d", good), TenantID: "acme", UserID: "u"}
		values = append(values, c.bytes())
		good++
	}
	stop, _ := e.startWorker(t, "--max-event-bytes", "1024")
	testenv.Produce(t, e.brokers, e.topic, values...)
	e.waitRows(t, good, 30*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
	if n := len(e.rows(t)); n != good {
		t.Errorf("%d rows, want the %d good events", n, good)
	}
	dead := testenv.ReadAll(t, e.brokers, e.topic+".dlq", len(bad), 20*time.Second)
	if len(dead) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(bad))
	}
	for _, m := range dead {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		want, ok := bad[string(m.Value)]
		if !ok {
			t.Errorf("dead letter with a value that was not sent bad: %q", m.Value)
			continue
		}
		if !strings.Contains(h[deadletter.HeaderReason], want) {
			t.Errorf("value %.30q: reason %q, want it to say %q", m.Value, h[deadletter.HeaderReason], want)
		}
		off, err := strconv.ParseInt(h[deadletter.HeaderSourceOffset], 10, 64)
		if h[deadletter.HeaderSourceTopic] != e.topic || h[deadletter.HeaderSourcePartition] == "" || err != nil || off < 0 {
			t.Errorf("source headers %v", h)
		}
	}
}

func TestStartupRefusesGCRuleMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	out, err := e.cmd(t, "run")
	if err == nil || !strings.Contains(err.Error(), "worker setup") {
		t.Fatalf("run before setup: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, `"max-age 2d"`) {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	// The operator changes default_ttl in the file without running setup.
	e.writeTenants(t, strings.Replace(tenantsYAML, "default_ttl: 2d", "default_ttl: 3d", 1))
	_, err = e.cmd(t, "run")
	if err == nil || !strings.Contains(err.Error(), `"max-age 2d"`) || !strings.Contains(err.Error(), `"max-age 3d"`) {
		t.Fatalf("run with a mismatched rule: %v; want both rules named", err)
	}
	// Setup refuses to change the rule silently, and does it when asked.
	if out, err := e.cmd(t, "setup"); err == nil || !strings.Contains(err.Error(), "--update-gc-policy") {
		t.Fatalf("setup over another rule: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup", "--update-gc-policy"); err != nil || !strings.Contains(out, `from "max-age 2d" to "max-age 3d"`) {
		t.Fatalf("setup --update-gc-policy: %v\n%s", err, out)
	}
	// One-second strategy needs max-age 1s.
	e.writeTenants(t, "strategy: one-second\ndefault_ttl: 3d\n")
	if _, err := e.cmd(t, "run"); err == nil || !strings.Contains(err.Error(), `"max-age 1000000"`) && !strings.Contains(err.Error(), `"max-age 1s"`) {
		t.Fatalf("run one-second on a 3d family: %v", err)
	}
}

func TestBadTenantsFileFailsStartup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 0s\n")
	_, err := e.cmd(t, "run")
	if err == nil || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), `"0s"`) {
		t.Fatalf("bad tenants file: %v", err)
	}
}

// Events produced by Kafka's own console producer, a client independent of
// the worker's, land per the contract.
func TestIndependentProducer(t *testing.T) {
	t.Parallel()
	lib := os.Getenv("TESTENV_KAFKA_LIB")
	if lib == "" {
		t.Skip("needs the Kafka tools of scripts/services.sh (make test runs it)")
	}
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	occurred := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	lines := fmt.Sprintf(`{"event_id":"k-1","tenant_id":"acme","user_id":"u-42","occurred_at":%q}
{"event_id":"k-2","tenant_id":"globex","occurred_at":%q,"extra":{"nested":[1,2]}}
`, occurred.Format(time.RFC3339Nano), occurred.Format(time.RFC3339Nano))
	cmd := exec.Command("java", "-cp", lib+"/*", "kafka.tools.ConsoleProducer", "--bootstrap-server", e.brokers[0], "--topic", e.topic)
	cmd.Stdin = strings.NewReader(lines)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("console producer: %v\n%s", err, out)
	}
	stop, _ := e.startWorker(t)
	rows := e.waitRows(t, 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for key, r := range rows {
		tenant := key[:strings.IndexByte(key, '#')]
		ev := cellsOf(r)["event"]
		if len(ev) != 1 || int64(ev[0].Timestamp) != wantTimestamp(tenant, occurred) || !strings.Contains(lines, string(ev[0].Value)) {
			t.Errorf("row %s: %+v", key, ev)
		}
	}
}

func TestDrainOnStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	const n = 3000
	values := make([][]byte, n)
	for i := range values {
		values[i] = click{EventID: fmt.Sprintf("d-%d", i), TenantID: "globex", UserID: fmt.Sprintf("u-%d", i%50)}.bytes()
	}
	testenv.Produce(t, e.brokers, e.topic, values...)
	// A long flush interval: whatever is batched when the stop comes must be
	// flushed by the drain, not by the timer.
	stop, _ := e.startWorker(t, "--flush-interval", "1h", "--flush-rows", "50000", "--commit-interval", "1h")
	time.Sleep(2 * time.Second) // let it fetch into the open batch
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// Every fetched event was written by the drain, and the commit covers
	// exactly those: per partition, offsets committed == rows written.
	written := eventIDs(e.rows(t))
	perPartition := map[int]int64{}
	for _, m := range testenv.ReadAll(t, e.brokers, e.topic, n, 20*time.Second) {
		var c click
		if err := json.Unmarshal(m.Value, &c); err != nil {
			t.Fatal(err)
		}
		if written[c.EventID] {
			perPartition[m.Partition]++
		}
	}
	committed, _ := testenv.Offsets(t, e.brokers, e.group, e.topic, partitions)
	total := int64(0)
	for p := 0; p < partitions; p++ {
		c := max(committed[p], 0)
		if c != perPartition[p] {
			t.Errorf("partition %d: committed %d, rows written %d", p, c, perPartition[p])
		}
		total += perPartition[p]
	}
	if total == 0 {
		t.Error("nothing written before the stop")
	}
	t.Logf("drained %d of %d events", total, n)
}

// eventIDs returns the event ids of rows, from the key's last part.
func eventIDs(rows map[string]bigtable.Row) map[string]bool {
	out := make(map[string]bool, len(rows))
	for key := range rows {
		out[key[strings.LastIndexByte(key, '#')+1:]] = true
	}
	return out
}

func TestReadCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	var values [][]byte
	for i, ago := range []time.Duration{30 * time.Minute, 20 * time.Minute, 10 * time.Minute} {
		values = append(values, click{EventID: fmt.Sprintf("r-%d", i), TenantID: "acme", UserID: "u-1", OccurredAt: now.Add(-ago).Format(time.RFC3339Nano)}.bytes())
	}
	values = append(values, click{EventID: "other-user", TenantID: "acme", UserID: "u-2", OccurredAt: now.Format(time.RFC3339Nano)}.bytes())
	stop, _ := e.startWorker(t)
	testenv.Produce(t, e.brokers, e.topic, values...)
	e.waitRows(t, len(values), 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	out, err := e.cmd(t, "read", "--tenant", "acme", "--user", "u-1", "--format", "json")
	if err != nil {
		t.Fatalf("read: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("read --user u-1: %d lines, want 3:\n%s", len(lines), out)
	}
	for i, line := range lines {
		var ev jsonEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		occurred := now.Add(-[]time.Duration{30 * time.Minute, 20 * time.Minute, 10 * time.Minute}[i])
		if ev.EventID != fmt.Sprintf("r-%d", i) || !ev.Expiry.Equal(occurred.Add(time.Hour)) || ev.Expired || ev.WrittenAt == nil || !strings.Contains(string(ev.Value), ev.EventID) {
			t.Errorf("line %d: %s; want r-%d expiring %s", i, line, i, occurred.Add(time.Hour))
		}
	}
	out, err = e.cmd(t, "read", "--tenant", "acme", "--since", "15m")
	if err != nil || strings.Count(out, "acme") != 2 || !strings.Contains(out, "r-2") || !strings.Contains(out, "other-user") || !strings.Contains(out, "(in 49m") {
		t.Errorf("read --since 15m: %v\n%s", err, out)
	}
}
