package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Teams whose events do not follow the contract's field names run the
// worker with configuration alone, and get the contract's rows and cells:
// the same keys, timestamps and reads as if their events did.
func TestMappedEventsLandPerContract(t *testing.T) {
	t.Parallel()
	occurred := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)
	type sent struct {
		tenant, user, id string
		msg              kafka.Message
	}
	type bad struct {
		msg        kafka.Message
		field, why string
	}
	tests := []struct {
		name  string
		flags []string
		good  []sent
		bad   []bad
	}{
		{
			name:  "customer_id, context.session.id, epoch milliseconds",
			flags: []string{"--tenant-from", "json:customer_id", "--event-id-from", "json:context.session.id", "--user-from", "json:context.user.id", "--event-time-from", "json:ts", "--event-time-format", "unix-ms"},
			good: func() (out []sent) {
				for i, tenant := range []string{"acme", "globex", "initech"} {
					v := fmt.Sprintf(`{"customer_id":%q,"ts":%d,"context":{"session":{"id":"s-%d"},"user":{"id":"u-1"}},"page":"/p"}`, tenant, occurred.UnixMilli(), i)
					out = append(out, sent{tenant, "u-1", fmt.Sprint("s-", i), kafka.Message{Value: []byte(v)}})
				}
				return out
			}(),
			bad: []bad{
				{kafka.Message{Value: []byte(`{"customer_id":"acme","ts":1,"context":{"user":{"id":"u-1"}}}`)}, "context.session.id", "context.session.id is missing"},
				{kafka.Message{Value: []byte(`{"customer_id":"acme","ts":"2026-11-21T09:00:00Z","context":{"session":{"id":"s-x"}}}`)}, "ts", "ts must be a JSON number of epoch milliseconds"},
			},
		},
		{
			name:  "tenant in a header",
			flags: []string{"--tenant-from", "header:x-tenant"},
			good: func() (out []sent) {
				for i, tenant := range []string{"acme", "globex", "initech"} {
					v := click{EventID: fmt.Sprint("h-", i), UserID: "u-1", OccurredAt: occurred.Format(time.RFC3339Nano)}.bytes()
					out = append(out, sent{tenant, "u-1", fmt.Sprint("h-", i), kafka.Message{Value: v, Headers: []kafka.Header{{Key: "x-tenant", Value: []byte(tenant)}}}})
				}
				return out
			}(),
			bad: []bad{
				{kafka.Message{Value: click{EventID: "h-none"}.bytes()}, "header:x-tenant", "header x-tenant is missing"},
				{kafka.Message{Value: click{EventID: "h-two"}.bytes(), Headers: []kafka.Header{{Key: "x-tenant", Value: []byte("acme")}, {Key: "x-tenant", Value: []byte("globex")}}},
					"header:x-tenant", "header x-tenant appears 2 times"},
			},
		},
		{
			name:  "tenant in the record key, time in seconds",
			flags: []string{"--tenant-from", "key", "--event-time-from", "json:ts", "--event-time-format", "unix-s"},
			good: func() (out []sent) {
				for i, tenant := range []string{"acme", "globex", "initech"} {
					v := fmt.Sprintf(`{"event_id":"k-%d","user_id":"u-1","ts":%d.%03d}`, i, occurred.Unix(), occurred.Nanosecond()/1e6)
					out = append(out, sent{tenant, "u-1", fmt.Sprint("k-", i), kafka.Message{Key: []byte(tenant), Value: []byte(v)}})
				}
				return out
			}(),
			bad: []bad{{kafka.Message{Value: []byte(`{"event_id":"k-none","ts":1}`)}, "key", "record key is missing"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tenantsYAML)
			if out, err := e.cmd(t, "setup"); err != nil {
				t.Fatalf("setup: %v\n%s", err, out)
			}
			stop, _ := e.startWorker(t, tt.flags...)
			var msgs []kafka.Message
			for _, s := range tt.good {
				msgs = append(msgs, s.msg)
			}
			for _, b := range tt.bad {
				msgs = append(msgs, b.msg)
			}
			testenv.ProduceMessages(t, e.brokers, e.topic, msgs...)
			rows := e.waitRows(t, len(tt.good), 30*time.Second)
			dead := testenv.ReadAll(t, e.brokers, e.topic+".dlq", len(tt.bad), 20*time.Second)
			e.waitCommitted(t, 30*time.Second)
			if err := stop(); err != nil {
				t.Fatalf("worker: %v", err)
			}
			if len(rows) != len(tt.good) {
				t.Errorf("%d rows, want %d", len(rows), len(tt.good))
			}
			for _, s := range tt.good {
				key := rowkey.Key(s.tenant, s.user, s.id, occurred.UnixMilli())
				cells := cellsOf(rows[key])
				if len(cells["event"]) != 1 {
					t.Errorf("row %q: %d event cells, want 1 (rows: %v)", key, len(cells["event"]), keysOf(rows))
					continue
				}
				c := cells["event"][0]
				if want := wantTimestamp(s.tenant, occurred); int64(c.Timestamp) != want || string(c.Value) != string(s.msg.Value) {
					t.Errorf("row %q: timestamp %d value %s, want %d and the message value", key, c.Timestamp, c.Value, want)
				}
			}
			if len(dead) != len(tt.bad) {
				t.Fatalf("%d dead letters, want %d", len(dead), len(tt.bad))
			}
			for _, b := range tt.bad {
				found := false
				for _, d := range dead {
					if string(d.Value) == string(b.msg.Value) {
						found = true
						if f, why := headerOf(d, deadletter.HeaderField), headerOf(d, deadletter.HeaderReason); f != b.field || !strings.Contains(why, b.why) {
							t.Errorf("dead letter of %s: field %q, reason %q; want %q and a reason containing %q", b.msg.Value, f, why, b.field, b.why)
						}
					}
				}
				if !found {
					t.Errorf("no dead letter for %s", b.msg.Value)
				}
			}
			// The reader finds the rows as it finds any: by tenant and user.
			out, err := e.cmd(t, "read", "--tenant", tt.good[0].tenant, "--user", "u-1", "--format", "json")
			if err != nil {
				t.Fatalf("read: %v\n%s", err, out)
			}
			var ev jsonEvent
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &ev); err != nil {
				t.Fatalf("read: %v\n%s", err, out)
			}
			if ev.EventID != tt.good[0].id || !ev.EventTime.Equal(occurred) || !ev.Expiry.Equal(occurred.Add(ttls[tt.good[0].tenant])) {
				t.Errorf("read: %s; want %s at %s", out, tt.good[0].id, occurred)
			}
		})
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
