package rollout

import (
	"strings"
	"testing"
	"time"
)

// Lines as the worker writes them (--log-format json), with a line that is
// not JSON among them.
const logA = `{"time":"2026-11-26T01:54:04.5Z","level":"INFO","msg":"joined consumer group","group":"g","generation":1,"member":"m-a","partitions":[0,1,2,3]}
{"time":"2026-11-26T01:54:10.5Z","level":"INFO","msg":"joined consumer group","group":"g","generation":2,"member":"m-a","partitions":[0,1]}
panic: not a log line
{"time":"2026-11-26T01:54:20.5Z","level":"ERROR","msg":"batch abandoned at the drain deadline; its events will be redelivered","rows":3}
{"time":"2026-11-26T01:54:20.6Z","level":"INFO","msg":"worker stopping","consumed":120,"written":100,"expired":5,"dead_lettered":2,"clamped":0,"erased":0,"committed":{"0":90}}
`

const logB = `{"time":"2026-11-26T01:54:10.4Z","level":"INFO","msg":"joined consumer group","group":"g","generation":2,"member":"m-b","partitions":[2,3]}
{"time":"2026-11-26T01:54:21.0Z","level":"INFO","msg":"joined consumer group","group":"g","generation":3,"member":"m-b","partitions":[0,1,2,3]}
`

func TestParseLog(t *testing.T) {
	a, err := parseLog(strings.NewReader(logA))
	if err != nil {
		t.Fatal(err)
	}
	if !a.stopped || a.totals.settled() != 107 || a.totals.Consumed != 120 {
		t.Errorf("totals %+v (stopped %v), want 100 written + 5 expired + 2 dead-lettered of 120 consumed", a.totals, a.stopped)
	}
	if a.errors != 1 {
		t.Errorf("ERROR lines: %d, want 1", a.errors)
	}
	if len(a.joins) != 2 || a.joins[1].generation != 2 || len(a.joins[1].partitions) != 2 {
		t.Errorf("joins %+v, want generations 1 and 2", a.joins)
	}
	b, err := parseLog(strings.NewReader(logB))
	if err != nil {
		t.Fatal(err)
	}
	if b.stopped {
		t.Error("a log without the stopping line read as stopped")
	}

	logs := map[string]workerLog{"a": a, "b": b}
	at := func(s string) time.Time { tm, _ := time.Parse(time.RFC3339, "2026-11-26T01:54:"+s+"Z"); return tm }
	// Generation 2 is joined by both workers: one generation; partitions
	// 2 and 3 moved from a to b. Generation 3 gives b a's 0 and 1.
	if st := generations(logs, at("05"), at("30")); st.count != 2 || st.moves != 4 {
		t.Errorf("generations from :05: %d with %d moves, want 2 with 4", st.count, st.moves)
	}
	// A generation counts from its first join, whichever log says it, and
	// a worker that takes it up later is late by the difference.
	st := generations(logs, at("10.45"), at("30"))
	if st.count != 1 || st.moves != 2 {
		t.Errorf("generations from :10.45: %d with %d moves, want 1 (generation 3) with 2", st.count, st.moves)
	}
	if st = generations(logs, at("05"), at("30")); st.late != 100*time.Millisecond || st.lateGen != 2 {
		t.Errorf("latest take-up: %s in generation %d, want 100ms in generation 2", st.late, st.lateGen)
	}
}
