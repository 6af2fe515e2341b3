package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/tenants"
)

// slowSchemas has every schema at hand but that of the values that say
// "slow", which the registry gives once released.
type slowSchemas struct{ released chan struct{} }

func (s slowSchemas) Ready(value []byte) bool {
	select {
	case <-s.released:
		return true
	default:
		return !bytes.Contains(value, []byte("slow"))
	}
}

func (s slowSchemas) Await(ctx context.Context, value []byte) error {
	if s.Ready(value) {
		return nil
	}
	select {
	case <-s.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// twoPartitions serves partition 0's values, then partition 1's, in one
// poll: the order a fetch response's chunk has them in.
func twoPartitions(p0, p1 []string) *fakeSource {
	s := &fakeSource{}
	for i, v := range append(slices.Clone(p0), p1...) {
		s.msgs = append(s.msgs, ingest.Message{Topic: "clicks", Partition: min(i/len(p0), 1), Offset: int64(i), Value: []byte(v), Time: time.Now()})
	}
	return s
}

func (w *fakeWriter) events() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, b := range w.batches {
		for _, r := range b {
			out = append(out, string(r.Value[strings.Index(string(r.Value), "e-"):][:3]))
		}
	}
	slices.Sort(out)
	return out
}

// A value whose schema the registry is slow to give holds its own
// partition, the partition's later records behind it, and nothing of the
// others: they are written and committed meanwhile. Once the schema comes,
// the partition goes on in order. The loop waited for it with every
// partition behind it, so that a producer of unknown ids on one partition
// set the pace of all.
func TestUnknownSchemaHoldsOnlyItsPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := `{"event_id":"e-0","tenant_id":"acme","slow":true}`
		src := twoPartitions([]string{slow, good(1)}, []string{good(2), good(3), good(4)})
		w, schemas := &fakeWriter{}, slowSchemas{released: make(chan struct{})}
		cfg := DefaultConfig()
		cfg.Schemas = schemas
		stop, _ := start(t, cfg, src, w, &fakeDLQ{}, func() *tenants.Config { return testConfig(t) })
		time.Sleep(cfg.FlushInterval)
		synctest.Wait()
		if got := fmt.Sprint(w.events()); got != "[e-2 e-3 e-4]" {
			t.Errorf("while partition 0 waits for a schema: rows %s, want partition 1's [e-2 e-3 e-4]", got)
		}
		if got := src.committed(); got != -1 {
			t.Errorf("committed %d while offset 0 waits, want nothing", got)
		}
		close(schemas.released)
		time.Sleep(cfg.FlushInterval)
		synctest.Wait()
		if got := fmt.Sprint(w.events()); got != "[e-0 e-1 e-2 e-3 e-4]" {
			t.Errorf("once the schema came: rows %s, want all five", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := src.committed(); got != 5 {
			t.Errorf("committed %d, want 5", got)
		}
	})
}

// A worker stopped while records wait for their schema leaves them
// unsettled (the partition's next owner reads them again), and its fetch
// ends with it.
func TestStopWhileASchemaIsAwaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := twoPartitions([]string{`{"event_id":"e-0","tenant_id":"acme","slow":true}`, good(1)}, []string{good(2)})
		w := &fakeWriter{}
		cfg := DefaultConfig()
		cfg.Schemas = slowSchemas{released: make(chan struct{})}
		stop, _ := start(t, cfg, src, w, &fakeDLQ{}, func() *tenants.Config { return testConfig(t) })
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(w.events()); got != "[e-2]" || src.committed() != -1 {
			t.Errorf("after stop: rows %s committed %d, want [e-2] and nothing committed", got, src.committed())
		}
	})
}

// Records held past half the byte budget make the loop wait for the
// schema instead of fetching on: held records never fill the budget
// unseen. The records still go through once it comes.
func TestHeldRecordsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := `{"event_id":"e-0","tenant_id":"acme","slow":true}`
		src := twoPartitions([]string{slow, good(1), good(2)}, []string{good(3)})
		src.perPoll = 1
		w, schemas := &fakeWriter{}, slowSchemas{released: make(chan struct{})}
		cfg := DefaultConfig()
		cfg.Schemas = schemas
		cfg.MaxInflightBytes = 4 * ingest.MessageOverhead // two records held reach half
		stop, _ := start(t, cfg, src, w, &fakeDLQ{}, func() *tenants.Config { return testConfig(t) })
		time.Sleep(cfg.FlushInterval)
		synctest.Wait()
		if got := fmt.Sprint(w.events()); got != "[]" {
			t.Errorf("with half the budget held: rows %s, want none (partition 1's not polled)", got)
		}
		close(schemas.released)
		time.Sleep(cfg.FlushInterval)
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(w.events()); got != "[e-0 e-1 e-2 e-3]" || src.committed() != 4 {
			t.Errorf("once the schema came: rows %s committed %d, want all four and 4", got, src.committed())
		}
	})
}
