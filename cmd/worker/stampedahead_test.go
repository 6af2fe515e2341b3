package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// An erased user's event appended before the erasure is never written
// afterwards, whatever time it carries. A producer chooses its records'
// timestamps: u-1's event stamped 30 minutes ahead waits in the backlog
// while worker forget runs, so its time lies past erased_up_to (now +
// --max-clock-skew). The ledger record holds the input topic's end
// offsets, and the worker erases by offset as well as by time: when it
// drains the backlog u-1 has no row, u-2 has hers, and u-1's event
// produced after the erasure is written. The receipt states the bound.
func TestErasureCoversEventsStampedAhead(t *testing.T) {
	testenv.BrokerVersionMatters(t, "how far ahead the broker lets a producer stamp a record")
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 3h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	ahead := time.Now().Add(30 * time.Minute).UTC()
	msg := func(id, user string, at time.Time) kafka.Message {
		return kafka.Message{Value: click{EventID: id, TenantID: "acme", UserID: user}.bytes(), Time: at}
	}
	// No occurred_at: the event's time is its record's.
	testenv.ProduceMessages(t, e.brokers, e.topic, msg("e-1", "u-1", ahead), msg("e-2", "u-2", ahead))

	out, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--allow-empty", "--requested-by", "ticket-7",
		"--second-pass-after", "1s", "--max-clock-skew", "2s", "--format", "json")
	if err != nil {
		t.Fatalf("forget: %v\n%s", err, out)
	}
	var rc struct {
		ErasedUpTo  time.Time `json:"erased_up_to"`
		ErasedBelow *struct {
			Topic string
			Ends  []int64 `json:"end_offsets"`
		} `json:"erased_below"`
		Bound string
	}
	if err := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &rc); err != nil {
		t.Fatalf("receipt: %v\n%s", err, out)
	}
	if !rc.ErasedUpTo.Before(ahead) {
		t.Fatalf("erased_up_to %s is not before the event's time %s: the test shows nothing", rc.ErasedUpTo, ahead)
	}
	if rc.ErasedBelow == nil || rc.ErasedBelow.Topic != e.topic || len(rc.ErasedBelow.Ends) != partitions || !strings.Contains(rc.Bound, "whatever time it carries") {
		t.Fatalf("the receipt states no bound by offset: %+v\n%s", rc, out)
	}
	var sum int64
	for _, end := range rc.ErasedBelow.Ends {
		sum += end
	}
	if sum != 2 {
		t.Errorf("end offsets %v: want the two records produced before the erasure", rc.ErasedBelow.Ends)
	}

	// u-1 comes back after the erasure: written.
	for time.Now().Before(rc.ErasedUpTo.Add(100 * time.Millisecond)) {
		time.Sleep(50 * time.Millisecond)
	}
	testenv.ProduceMessages(t, e.brokers, e.topic, msg("e-3", "u-1", time.Now()))
	stop, _ := e.startWorker(t, "--erasure-refresh", "200ms", "--max-clock-skew", "2s")
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for key := range e.rows(t) {
		p, err := rowkey.Parse(key)
		if err != nil {
			t.Fatal(err)
		}
		got[fmt.Sprintf("%s/%s", p.User, p.EventID)] = true
	}
	if got["u-1/e-1"] || !got["u-2/e-2"] || !got["u-1/e-3"] || len(got) != 2 {
		t.Errorf("rows %v: want u-2's e-2 and u-1's e-3 (after the erasure), not u-1's e-1 (stamped ahead, appended before)", got)
	}
}
