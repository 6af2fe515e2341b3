package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// fakeSource serves msgs on partition 0, perPoll at a time (all when 0),
// then blocks; it commits what is settled, as the consumer does on its own.
type fakeSource struct {
	mu      sync.Mutex
	msgs    []ingest.Message
	next    int
	perPoll int
	settled settlements
}

func newSource(values ...string) *fakeSource {
	s := &fakeSource{}
	for i, v := range values {
		s.msgs = append(s.msgs, ingest.Message{Topic: "clicks", Partition: 0, Offset: int64(i), Value: []byte(v), Time: time.Now()})
	}
	return s
}

func (s *fakeSource) Poll(ctx context.Context, reuse []ingest.Fetched) ([]ingest.Fetched, error) {
	s.mu.Lock()
	if s.next < len(s.msgs) {
		n := len(s.msgs) - s.next
		if s.perPoll > 0 {
			n = min(n, s.perPoll)
		}
		out := reuse[:0]
		for _, m := range s.msgs[s.next : s.next+n] {
			out = append(out, ingest.Fetched{Msg: m, Ack: ingest.Ack{Offset: m.Offset}})
		}
		s.settled.handOut(n)
		s.next += n
		s.mu.Unlock()
		return out, nil
	}
	s.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *fakeSource) Done(a ingest.Ack) { s.settled.settle(a) }

func (s *fakeSource) Failed() <-chan struct{} { return nil }

func (s *fakeSource) Settle(acks []ingest.Ack) { s.settled.settle(acks...) }

// committed is what the source has committed, as a consumer would by now
// (it commits what is settled on its own): the first offset not settled,
// -1 while that is the first offset.
func (s *fakeSource) committed() int64 {
	if c := s.settled.commitPoint(); c > 0 {
		return c
	}
	return -1
}

// settlements is a fake source's bookkeeping of what is settled, kept as
// the consumer keeps it: offsets are handed out in order from 0, each is
// settled once, in any order, and the commit point only moves over a
// prefix that is all settled. An Ack settled twice, or one never handed
// out (the zero Ack settles offset 0), breaks the Source's contract: it
// panics, so that no test passes on a repeat.
type settlements struct {
	mu      sync.Mutex
	settled []bool // by offset, of the offsets handed out
	point   int64  // every offset below it is settled
}

// handOut records the next n offsets as handed out.
func (s *settlements) handOut(n int) {
	s.mu.Lock()
	s.settled = append(s.settled, make([]bool, n)...)
	s.mu.Unlock()
}

// settle settles the acks' offsets, and returns the commit point after
// them.
func (s *settlements) settle(acks ...ingest.Ack) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range acks {
		if a.Offset < 0 || a.Offset >= int64(len(s.settled)) || s.settled[a.Offset] {
			panic(fmt.Sprintf("offset %d settled twice, or never handed out (%d were)", a.Offset, len(s.settled)))
		}
		s.settled[a.Offset] = true
	}
	for s.point < int64(len(s.settled)) && s.settled[s.point] {
		s.point++
	}
	return s.point
}

// commitPoint is the first offset not settled.
func (s *settlements) commitPoint() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.point
}

// fakeWriter records batches; block, when set, holds every write until it
// is closed; refuse names row keys rejected for good.
type fakeWriter struct {
	mu      sync.Mutex
	batches [][]sink.Row
	block   chan struct{}
	refuse  string
}

func (w *fakeWriter) Write(ctx context.Context, rows []sink.Row) ([]error, error) {
	if w.block != nil {
		select {
		case <-w.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batches = append(w.batches, slices.Clone(rows)) // rows are reused once Write returns
	res := make([]error, len(rows))
	for i, r := range rows {
		if w.refuse != "" && strings.Contains(r.Key, w.refuse) {
			res[i] = &sink.RowError{Code: codes.InvalidArgument, Err: errors.New("refused")}
		}
	}
	return res, nil
}

func (w *fakeWriter) sizes() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, b := range w.batches {
		out = append(out, len(b))
	}
	return out
}

// fakeDLQ fails while failing is set.
type fakeDLQ struct {
	mu      sync.Mutex
	failing bool
	got     []deadletter.Letter
}

func (d *fakeDLQ) Write(_ context.Context, dls []deadletter.Letter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failing {
		return errors.New("broker down")
	}
	d.got = append(d.got, dls...)
	return nil
}

// partialDLQ delivers the first letter of each write and fails the rest,
// once, as kafka-go does when one of the topics or partitions fails.
type partialDLQ struct {
	fakeDLQ
	failed bool
}

func (d *partialDLQ) Write(_ context.Context, dls []deadletter.Letter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed || len(dls) < 2 {
		d.got = append(d.got, dls...)
		return nil
	}
	d.failed = true
	d.got = append(d.got, dls[0])
	delivered := make([]bool, len(dls))
	delivered[0] = true
	return &deadletter.ProduceError{Err: errors.New("one partition has no leader"), Delivered: delivered}
}

// Regression (review): a write of letters to several topics that failed
// for one of them was retried whole, producing the delivered letters again
// on every attempt; now only the missing ones are retried.
func TestPartlyDeliveredLettersAreNotSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, w, dlq := newSource("a", "b", "c"), &fakeWriter{}, &partialDLQ{}
		src.perPoll = 3
		stop, _ := start(t, DefaultConfig(), src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(5 * time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		seen := map[int64]int{}
		for _, dl := range dlq.got {
			seen[dl.Msg.Offset]++
		}
		if len(dlq.got) != 3 || seen[0] != 1 || seen[1] != 1 || seen[2] != 1 || src.committed() != 3 {
			t.Errorf("letters produced per offset %v (%d in all), committed %d; want each once, 3", seen, len(dlq.got), src.committed())
		}
	})
}

func (d *fakeDLQ) setFailing(f bool) {
	d.mu.Lock()
	d.failing = f
	d.mu.Unlock()
}

func testConfig(t *testing.T) *tenants.Config {
	cfg, err := tenants.Parse([]byte("default_ttl: 2d\ntenants:\n  acme: 1h\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func good(i int) string {
	return fmt.Sprintf(`{"event_id":"e-%d","tenant_id":"acme"}`, i)
}

func start(t *testing.T, cfg Config, src Source, w RowWriter, dlq DeadLetterer, config func() *tenants.Config) (stop func() error, p *Pipeline) {
	ctx, cancel := context.WithCancel(context.Background())
	p = New(cfg, src, w, dlq, config, nil, nil, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() error { cancel(); return <-done }, p
}

func TestBatchesFlushOnCountAndAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var values []string
		for i := range 25 {
			values = append(values, good(i))
		}
		src, w := newSource(values...), &fakeWriter{}
		cfg := DefaultConfig()
		cfg.FlushRows, cfg.Writers = 10, 1
		stop, _ := start(t, cfg, src, w, &fakeDLQ{}, func() *tenants.Config { return testConfig(t) })
		synctest.Wait()
		// Two full batches at once; the remaining five wait for the interval.
		if got := fmt.Sprint(w.sizes()); got != "[10 10]" {
			t.Errorf("before the flush interval: batches %s, want [10 10]", got)
		}
		time.Sleep(cfg.FlushInterval)
		synctest.Wait()
		if got := fmt.Sprint(w.sizes()); got != "[10 10 5]" {
			t.Errorf("after the flush interval: batches %s, want [10 10 5]", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := src.committed(); got != 25 {
			t.Errorf("committed %d, want 25", got)
		}
	})
}

func TestDrainFlushesOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, w := newSource(good(1), good(2), good(3)), &fakeWriter{}
		cfg := DefaultConfig()
		cfg.FlushInterval = time.Hour
		stop, _ := start(t, cfg, src, w, &fakeDLQ{}, func() *tenants.Config { return testConfig(t) })
		synctest.Wait()
		if len(w.sizes()) != 0 {
			t.Fatalf("flushed before the interval: %v", w.sizes())
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(w.sizes()); got != "[3]" || src.committed() != 3 {
			t.Errorf("after stop: batches %s committed %d, want [3] and 3", got, src.committed())
		}
	})
}

// While the dead-letter topic is down, nothing at or after the bad event is
// committed, though later good events are written; once it is back, the
// commit catches up.
func TestDeadLetterFailureBlocksCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, w, dlq := newSource(good(0), "not json", good(2), good(3)), &fakeWriter{}, &fakeDLQ{failing: true}
		cfg := DefaultConfig()
		stop, p := start(t, cfg, src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := p.Stats().Tenant("acme").Written.Load(); n != 3 {
			t.Errorf("written %d, want the 3 good events", n)
		}
		if got := src.committed(); got != 1 {
			t.Errorf("committed %d while the dead letter is unsent, want 1", got)
		}
		dlq.setFailing(false)
		time.Sleep(15 * time.Second) // longer than the backoff can have grown
		synctest.Wait()
		if got := src.committed(); got != 4 {
			t.Errorf("committed %d after the dead-letter topic recovered, want 4", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(dlq.got) != 1 || dlq.got[0].Msg.Offset != 1 || !strings.Contains(dlq.got[0].Reason, "not a JSON object") {
			t.Errorf("dead letters %+v", dlq.got)
		}
	})
}

func TestRefusedRowIsDeadLettered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, w, dlq := newSource(good(0), good(1), good(2)), &fakeWriter{refuse: "#e-1"}, &fakeDLQ{}
		stop, p := start(t, DefaultConfig(), src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(dlq.got) != 1 || dlq.got[0].Msg.Offset != 1 || !strings.Contains(dlq.got[0].Reason, "InvalidArgument") {
			t.Errorf("dead letters %+v", dlq.got)
		}
		st := p.Stats().Tenant("acme")
		if st.Written.Load() != 2 || st.DeadLettered.Load() != 1 || src.committed() != 3 {
			t.Errorf("written %d dead-lettered %d committed %d", st.Written.Load(), st.DeadLettered.Load(), src.committed())
		}
	})
}

// A refused row's dead letter names its tenant and when the event expires
// in Bigtable, and may keep its payload until then, never later; a letter
// without a listed tenant keeps it the unlisted bound from its record's
// time.
func TestDeadLetterBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, w, dlq := newSource(good(0), good(1), "not json"), &fakeWriter{refuse: "#e-1"}, &fakeDLQ{}
		cfg := DefaultConfig()
		cfg.UnlistedDeadLetterTTL = 10 * time.Minute
		stop, _ := start(t, cfg, src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(dlq.got) != 2 {
			t.Fatalf("dead letters %+v", dlq.got)
		}
		refused, bad := dlq.got[0], dlq.got[1]
		if refused.Msg.Offset != 1 {
			refused, bad = bad, refused
		}
		// acme's TTL is 1h from the record's time (no occurred_at).
		want := refused.Msg.Time.Truncate(time.Millisecond).Add(time.Hour)
		if refused.Tenant != "acme" || !refused.ExpiresAt.Equal(want) || !refused.KeepUntil.Equal(want) || refused.Class != "bigtable_refused" {
			t.Errorf("refused row's letter: tenant %q, expires %s, keep until %s, class %q; want acme, %s", refused.Tenant, refused.ExpiresAt, refused.KeepUntil, refused.Class, want)
		}
		if bad.Tenant != "" || !bad.ExpiresAt.IsZero() || !bad.KeepUntil.Equal(bad.Msg.Time.Add(10*time.Minute)) || bad.Class != "not_json" {
			t.Errorf("malformed event's letter: tenant %q, expires %s, keep until %s, class %q", bad.Tenant, bad.ExpiresAt, bad.KeepUntil, bad.Class)
		}
	})
}

// Regression (review): an invalid event of a listed tenant carries no
// trusted tenant, and its letter kept its payload default_ttl (2d) while
// acme's TTL is 1h: now no longer than the shortest TTL of the file. A
// refused row of an unlisted tenant keeps it the unlisted bound, and names
// no tenant.
func TestDeadLetterOfAnInvalidEventKeepsNoLongerThanAnyTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newSource(`{"event_id":"e#1","tenant_id":"acme","user_id":"alice"}`, `{"event_id":"e-2","tenant_id":"zed"}`)
		w, dlq := &fakeWriter{refuse: "#e-2"}, &fakeDLQ{}
		cfg := DefaultConfig()
		cfg.UnlistedDeadLetterTTL = 30 * time.Minute
		stop, _ := start(t, cfg, src, w, dlq, func() *tenants.Config { return testConfig(t) }) // default_ttl 2d, acme 1h
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(dlq.got) != 2 {
			t.Fatalf("dead letters %+v", dlq.got)
		}
		for _, dl := range dlq.got {
			switch dl.Msg.Offset {
			case 0:
				if bound := dl.Msg.Time.Add(30 * time.Minute); dl.KeepUntil.After(bound) || dl.Tenant != "" {
					t.Errorf("invalid acme event: keep until %s (%s after the record), tenant %q; want at most 30m", dl.KeepUntil, dl.KeepUntil.Sub(dl.Msg.Time), dl.Tenant)
				}
			case 1:
				if bound := dl.Msg.Time.Add(30 * time.Minute); dl.KeepUntil.After(bound) || dl.Tenant != "" || dl.ExpiresAt.IsZero() {
					t.Errorf("unlisted tenant's refused row: keep until %s, tenant %q, expires %s", dl.KeepUntil, dl.Tenant, dl.ExpiresAt)
				}
			}
		}
	})
	// Without --dlq-unlisted-retention, the shortest TTL (acme's 1h) bounds it.
	synctest.Test(t, func(t *testing.T) {
		src, w, dlq := newSource(`{"event_id":"e#1","tenant_id":"acme"}`), &fakeWriter{}, &fakeDLQ{}
		stop, _ := start(t, DefaultConfig(), src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(dlq.got) != 1 || dlq.got[0].KeepUntil.After(dlq.got[0].Msg.Time.Add(time.Hour)) {
			t.Errorf("dead letters %+v: want one kept at most acme's 1h", dlq.got)
		}
	})
}

// A record stamped further ahead than --max-clock-skew is counted, and its
// cells still follow it (a pure function of the record).
func TestRecordsAheadAreCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, w, dlq := newSource(good(0), good(1), good(2)), &fakeWriter{}, &fakeDLQ{}
		src.msgs[1].Time = time.Now().Add(DefaultConfig().Decoder.MaxClockSkew + time.Millisecond)
		src.msgs[2].Time = time.Now().Add(DefaultConfig().Decoder.MaxClockSkew)
		stop, p := start(t, DefaultConfig(), src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if n := p.Stats().TimestampsAhead(); n != 1 {
			t.Errorf("%d records counted ahead, want 1", n)
		}
		if n := len(w.batches[0]); n != 3 {
			t.Errorf("%d rows written, want 3", n)
		}
	})
}

// Events of a tenant the file does not list are counted, and under
// unlisted_tenants: dead-letter set aside with reason unlisted_tenant
// instead of living default_ttl; the default keeps today's behaviour.
func TestUnlistedTenants(t *testing.T) {
	for _, policy := range []string{"", "unlisted_tenants: default_ttl\n", "unlisted_tenants: dead-letter\n"} {
		t.Run(strings.TrimSpace(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, err := tenants.Parse([]byte("default_ttl: 2d\n" + policy + "tenants:\n  acme: 1h\n"))
				if err != nil {
					t.Fatal(err)
				}
				src := newSource(good(0), `{"event_id":"e-1","tenant_id":"acmee"}`, `{"event_id":"e-2","tenant_id":"acmee"}`, `{"event_id":"e-3","tenant_id":"zed"}`)
				w, dlq := &fakeWriter{}, &fakeDLQ{}
				stop, p := start(t, DefaultConfig(), src, w, dlq, func() *tenants.Config { return cfg })
				time.Sleep(time.Second)
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				if n := p.Stats().UnlistedTotal(); n != 3 {
					t.Errorf("unlisted events counted %d, want 3", n)
				}
				if top := p.Stats().TopUnlisted(1); len(top) != 1 || top[0] != (UnlistedCount{Tenant: "acmee", Bytes: 5, Events: 2}) {
					t.Errorf("most frequent unlisted %+v, want acmee 2", top)
				}
				written := 0
				for _, b := range w.batches {
					written += len(b)
				}
				if strings.Contains(policy, "dead-letter") {
					if written != 1 || len(dlq.got) != 3 || dlq.got[0].Class != "unlisted_tenant" || dlq.got[0].Tenant != "acmee" || dlq.got[0].Field != "tenant_id" ||
						!strings.Contains(dlq.got[0].Reason, `"acmee"`) {
						t.Errorf("dead-letter policy: %d written, dead letters %+v", written, dlq.got)
					}
				} else if written != 4 || len(dlq.got) != 0 {
					t.Errorf("default_ttl policy: %d written, %d dead-lettered; want 4 and 0", written, len(dlq.got))
				}
				if src.committed() != 4 {
					t.Errorf("committed %d, want 4", src.committed())
				}
			})
		})
	}
}

// Tenant ids are the producers' choice: the stats rows that become metric
// labels are the listed tenants', _unlisted and _other, whatever ids the
// events carry, valid or not, under either unlisted_tenants policy.
func TestNoProducerChosenTenantBecomesARow(t *testing.T) {
	for _, policy := range []string{"unlisted_tenants: default_ttl\n", "unlisted_tenants: dead-letter\n"} {
		t.Run(strings.TrimSpace(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, err := tenants.Parse([]byte("default_ttl: 2d\n" + policy + "tenants:\n  acme: 1h\n"))
				if err != nil {
					t.Fatal(err)
				}
				values := []string{good(0), `{"event_id":"e-bad","tenant_id":"acme","occurred_at":"never"}`}
				for i := range 50 {
					values = append(values, fmt.Sprintf(`{"event_id":"u-%d","tenant_id":"chosen-%d"}`, i, i),
						fmt.Sprintf(`{"event_id":"b-%d","tenant_id":"forged-%d","occurred_at":"never"}`, i, i))
				}
				src, w, dlq := newSource(values...), &fakeWriter{}, &fakeDLQ{}
				stop, p := start(t, DefaultConfig(), src, w, dlq, func() *tenants.Config { return cfg })
				time.Sleep(time.Second)
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				rows := map[string]int64{}
				p.Stats().Each(func(id string, ts *TenantStats) { rows[id] = ts.Consumed.Load() })
				// An invalid event's ids are not trusted: acme's e-bad is
				// _other's too.
				// Dead-lettered or written, an unlisted tenant's event is
				// _unlisted's.
				want := map[string]int64{"acme": 1, UnlistedTenants: 50, OtherTenants: 51}
				if !maps.Equal(rows, want) {
					t.Errorf("stats rows %v, want %v", rows, want)
				}
				if n := p.Stats().UnlistedTotal(); n != 50 {
					t.Errorf("unlisted events %d, want 50", n)
				}
			})
		})
	}
}

// Regression (review): while the dead-letter topic is down and its queue
// full, the fetch loop waits to queue the next bad event. The good rows it
// holds are written at their interval all the same, and a batch's written
// rows are settled before its refused row waits for the dead-letter topic:
// the offset before the refused row is committed.
func TestDeadLetterBackupHoldsNoGoodRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		values := []string{good(0), good(1)}
		for range 2000 { // beyond the dead-letter queue and one produce's batch
			values = append(values, "not json")
		}
		src, w, dlq := newSource(values...), &fakeWriter{refuse: "#e-1"}, &fakeDLQ{failing: true}
		stop, p := start(t, DefaultConfig(), src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := p.Stats().Tenant("acme").Written.Load(); n != 1 {
			t.Errorf("written %d with the dead-letter topic down, want the good row", n)
		}
		if got := src.committed(); got != 1 {
			t.Errorf("committed %d with the dead-letter topic down, want 1 (the written row before the refused one)", got)
		}
		dlq.setFailing(false)
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := src.committed(); got != int64(len(values)) || len(dlq.got) != 2001 {
			t.Errorf("after the dead-letter topic recovered: committed %d, %d dead letters; want %d and 2001", got, len(dlq.got), len(values))
		}
	})
}

// A config swap cuts the batch: every batch was computed under one version.
func TestBatchPerConfigVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := testConfig(t)
		b, err := tenants.Parse([]byte("default_ttl: 2d\ntenants:\n  acme: 2h\n"))
		if err != nil {
			t.Fatal(err)
		}
		var values []string
		for i := range 6 {
			values = append(values, good(i))
		}
		src, w := newSource(values...), &fakeWriter{}
		src.perPoll = 1 // the config is read once per poll
		var mu sync.Mutex
		calls := 0
		config := func() *tenants.Config {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls > 3 {
				return b
			}
			return a
		}
		stop, _ := start(t, DefaultConfig(), src, w, &fakeDLQ{}, config)
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(w.sizes()); got != "[3 3]" {
			t.Fatalf("batches %s, want [3 3]", got)
		}
		// The second batch carries acme's new TTL: one hour later cells.
		if d := w.batches[1][0].Timestamp - w.batches[0][0].Timestamp; d < time.Hour.Microseconds() {
			t.Errorf("second batch not shifted by the new TTL: delta %dµs", d)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg.FlushRows = 60000
	cfg.Writers = 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--flush-rows 60000") || !strings.Contains(err.Error(), "--writers 0") {
		t.Errorf("Validate = %v", err)
	}
}

// A batch span carries rows, bytes, config version and attempts, and links
// to the producer spans of messages that bring a W3C trace context.
func TestBatchSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))

	src := newSource(good(0), good(1))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	src.msgs[0].Headers = []ingest.Header{{Key: "traceparent", Value: []byte(parent)}}
	cfg := testConfig(t)
	p := New(DefaultConfig(), src, &fakeWriter{}, &fakeDLQ{}, func() *tenants.Config { return cfg }, nil, tp, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want one per batch", len(spans))
	}
	s := spans[0]
	attrs := map[string]string{}
	for _, a := range s.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["cellttl.batch.rows"] != "2" || attrs["cellttl.config_version"] != cfg.Version || attrs["cellttl.batch.written"] != "2" {
		t.Errorf("span attributes %v", attrs)
	}
	if len(s.Links()) != 1 || s.Links()[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("links %+v, want the producer's trace", s.Links())
	}
}

// failingSource serves its messages, then fails as a source does when the
// worker must stop (--offset-out-of-range fail): Poll returns err, and
// failed is closed, as the consumer's Failed is.
type failingSource struct {
	*fakeSource
	err    error
	failed chan struct{}
	once   sync.Once
}

func (s *failingSource) Failed() <-chan struct{} { return s.failed }

func (s *failingSource) Poll(ctx context.Context, reuse []ingest.Fetched) ([]ingest.Fetched, error) {
	s.mu.Lock()
	more := s.next < len(s.msgs)
	s.mu.Unlock()
	if more {
		return s.fakeSource.Poll(ctx, reuse)
	}
	s.once.Do(func() { close(s.failed) })
	return nil, s.err
}

// Regression: a source that must stop the worker stopped it only
// once its writes and dead letters were done: with Bigtable taking no
// writes and the dead-letter topic down, --offset-out-of-range fail never
// exited (the drain deadline started on SIGTERM alone). The deadline now
// starts when the source fails too.
func TestFatalSourceErrorStopsWithinTheDrainTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fatal := errors.New("partition 0 of clicks: offset 500 is outside the log")
		src := &failingSource{fakeSource: newSource(good(1), "not json"), err: fatal, failed: make(chan struct{})}
		w, dlq := &fakeWriter{block: make(chan struct{})}, &fakeDLQ{failing: true}
		cfg := DefaultConfig()
		cfg.DrainTimeout = 30 * time.Second
		p := New(cfg, src, w, dlq, func() *tenants.Config { return testConfig(t) }, nil, nil, slog.New(slog.DiscardHandler))
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- p.Run(context.Background()) }()
		select {
		case err := <-done:
			if !errors.Is(err, fatal) {
				t.Errorf("Run: %v, want the source's error", err)
			}
			if took := time.Since(start); took > cfg.DrainTimeout+10*time.Second {
				t.Errorf("Run returned after %s, drain timeout %s", took, cfg.DrainTimeout)
			}
		case <-time.After(10 * time.Minute):
			t.Fatal("Run did not return with Bigtable and the dead-letter topic down")
		}
		close(w.block)
	})
}

// notes serves fakeSource's messages with the fetcher's notes: by offset,
// a Cut or an Undecodable.
type notes struct {
	*fakeSource
	cut         map[int64]*ingest.Cut
	undecodable map[int64]*ingest.Undecodable
}

func (s *notes) Poll(ctx context.Context, reuse []ingest.Fetched) ([]ingest.Fetched, error) {
	b, err := s.fakeSource.Poll(ctx, reuse)
	for i := range b {
		b[i].Cut, b[i].Undecodable = s.cut[b[i].Msg.Offset], s.undecodable[b[i].Msg.Offset]
	}
	return b, err
}

// A record the fetcher held cut is dead-lettered as too large, with the
// size of all of it (its first bytes would be too); an undecodable batch is
// dead-lettered as what it is. Both are settled, and the commit passes
// them.
func TestCutRecordsAndUndecodableBatchesAreDeadLettered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &notes{fakeSource: newSource(good(0), good(1), "", good(3), good(4)),
			// 4: a value that fits, with headers too large to hold (the
			// user id may have been in them): never decoded.
			cut:         map[int64]*ingest.Cut{1: {Size: 5 << 20}, 4: {Size: int64(len(good(4))), Dropped: "headers"}},
			undecodable: map[int64]*ingest.Undecodable{2: {Last: 2, Codec: "zstd", Reason: "record batch at offsets 2 to 2 (zstd, 9 bytes) cannot be decoded: broken"}}}
		w, dlq := &fakeWriter{}, &fakeDLQ{}
		stop, p := start(t, DefaultConfig(), src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(time.Second)
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(dlq.got) != 3 {
			t.Fatalf("%d dead letters, want 3: %+v", len(dlq.got), dlq.got)
		}
		if d := dlq.got[2]; d.Cut == nil || !strings.Contains(d.Reason, "the record's headers took more than 64 KiB") {
			t.Errorf("cut headers: %+v", d)
		}
		if d := dlq.got[0]; d.Cut == nil || !strings.Contains(d.Reason, fmt.Sprintf("value is %d bytes, more than the limit", 5<<20)) {
			t.Errorf("cut record: %+v", d)
		}
		if d := dlq.got[1]; d.Undecodable == nil || !strings.Contains(d.Reason, "cannot be decoded") {
			t.Errorf("undecodable batch: %+v", d)
		}
		if n := p.Stats().Tenant("acme").Written.Load(); n != 2 {
			t.Errorf("written %d, want 2", n)
		}
		if got := src.committed(); got != 5 {
			t.Errorf("committed %d, want 5", got)
		}
	})
}

// withdrawWriter withdraws the rows whose key holds withdraw, as a
// sink.Writer does when the erasure ledger learns of their user while
// they wait.
type withdrawWriter struct {
	fakeWriter
	withdraw string
}

func (w *withdrawWriter) Write(ctx context.Context, rows []sink.Row) ([]error, error) {
	res, err := w.fakeWriter.Write(ctx, rows)
	for i, r := range rows {
		if err == nil && strings.Contains(r.Key, w.withdraw) {
			res[i] = sink.ErrWithdrawn
		}
	}
	return res, err
}

// Events of an erased user up to erased_up_to are neither written nor
// dead-lettered, of a listed tenant or an unlisted one: skipped, counted
// as erased, their offsets committed. The user's later event, another
// user's, and an event without a user are written. A row withdrawn at
// write time is counted as erased and settled, not dead-lettered.
func TestErasedUsersAreNotWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := tenants.Parse([]byte("default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		ev := func(id, tenant, user string, at time.Time) string {
			return fmt.Sprintf(`{"event_id":%q,"tenant_id":%q,"user_id":%q,"occurred_at":%q}`, id, tenant, user, at.Format(time.RFC3339Nano))
		}
		upTo := now.Add(-time.Minute)
		ledger := erasure.NewLedger([]erasure.Erasure{{Tenant: "acme", User: "u1", UpTo: upTo}, {Tenant: "zed", User: "u1", UpTo: upTo}}, now)
		src := newSource(
			ev("e-0", "acme", "u1", upTo),                       // erased: at erased_up_to
			ev("e-1", "acme", "u1", upTo.Add(-30*time.Minute)),  // erased
			ev("e-2", "acme", "u1", upTo.Add(time.Millisecond)), // came back: written
			ev("e-3", "acme", "u2", upTo),                       // another user: written
			ev("e-4", "zed", "u1", upTo),                        // unlisted, erased: no letter either
			ev("e-5", "acme", "u3", upTo),                       // withdrawn at write time
			`{"event_id":"e-6","tenant_id":"acme"}`,             // no user: written
		)
		w, dlq := &withdrawWriter{withdraw: "#u3#"}, &fakeDLQ{}
		pcfg := DefaultConfig()
		pcfg.Erasures = func() *erasure.Ledger { return ledger }
		stop, p := start(t, pcfg, src, w, dlq, func() *tenants.Config { return cfg })
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, b := range w.batches {
			for _, r := range b {
				keys = append(keys, r.Key)
			}
		}
		if len(keys) != 4 || strings.Contains(strings.Join(keys, " "), "#e-0") || strings.Contains(strings.Join(keys, " "), "#e-1") {
			t.Errorf("rows sent to be written %q, want e-2, e-3, e-5, e-6", keys)
		}
		if len(dlq.got) != 0 {
			t.Errorf("dead letters %+v, want none", dlq.got)
		}
		acme, zed := p.Stats().Tenant("acme"), p.Stats().Tenant(UnlistedTenants)
		if acme.Erased.Load() != 3 || acme.Written.Load() != 3 || zed.Erased.Load() != 1 || p.Stats().Totals().Erased != 4 {
			t.Errorf("acme erased %d written %d, unlisted erased %d; want 3, 3, 1", acme.Erased.Load(), acme.Written.Load(), zed.Erased.Load())
		}
		if src.committed() != 7 {
			t.Errorf("committed %d, want 7", src.committed())
		}
	})
}

// No dead letter carries an erased user's event: not one whose time is
// invalid (erased by its record's time), nor a row Bigtable refused after
// the user was erased while it waited.
func TestErasedUsersGetNoDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		src := newSource(
			`{"event_id":"e-0","tenant_id":"acme","user_id":"u9","occurred_at":"yesterday"}`, // erased: bad time, record time covered
			`{"event_id":"e-1","tenant_id":"acme","user_id":"u7","occurred_at":"yesterday"}`, // not erased: dead-lettered
			`{"event_id":"e-2","tenant_id":"acme","user_id":"u8"}`,                           // refused, its user erased once decided
		)
		u9 := erasure.Erasure{Tenant: "acme", User: "u9", UpTo: now.Add(time.Hour)}
		u8 := erasure.Erasure{Tenant: "acme", User: "u8", UpTo: now.Add(time.Hour)}
		var calls atomic.Int32
		pcfg := DefaultConfig()
		pcfg.Erasures = func() *erasure.Ledger {
			if calls.Add(1) <= 3 { // the three decisions
				return erasure.NewLedger([]erasure.Erasure{u9}, now)
			}
			return erasure.NewLedger([]erasure.Erasure{u9, u8}, now) // the letter's, at its produce
		}
		w, dlq := &fakeWriter{refuse: "#e-2"}, &fakeDLQ{}
		stop, p := start(t, pcfg, src, w, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(dlq.got) != 1 || dlq.got[0].Msg.Offset != 1 {
			t.Errorf("dead letters %+v, want e-1's alone", dlq.got)
		}
		if n := p.Stats().Tenant("acme").Erased.Load(); n != 2 {
			t.Errorf("acme erased %d, want 2 (e-0, e-2)", n)
		}
		if src.committed() != 3 {
			t.Errorf("committed %d, want 3", src.committed())
		}
	})
}

// A letter is judged by the ledger when it is produced, not only when its
// event was decided: letters that waited out a dead-letter-topic outage
// obey the erasure recorded meanwhile. The erased user's letter is never
// produced (settled as erased); a letter whose user could not be read
// loses its payload once an erasure could cover it; another user's keeps
// its own.
func TestLettersObeyTheLedgerWhenProduced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		src := newSource(
			`{"event_id":"a","tenant_id":"acme","user_id":"u1","occurred_at":"never"}`, // u1's, erased during the outage
			`not json`, // no user read
			`{"event_id":"c","tenant_id":"acme","user_id":"u2","occurred_at":"never"}`, // u2's, never erased
		)
		var ledger atomic.Pointer[erasure.Ledger]
		ledger.Store(erasure.NewLedger(nil, now))
		pcfg := DefaultConfig()
		pcfg.Erasures = ledger.Load
		dlq := &fakeDLQ{failing: true}
		stop, p := start(t, pcfg, src, &fakeWriter{}, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(5 * time.Second)
		synctest.Wait()
		ledger.Store(erasure.NewLedger([]erasure.Erasure{{Tenant: "acme", User: "u1", UpTo: now.Add(time.Hour)}}, now))
		dlq.setFailing(false)
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, dl := range dlq.got {
			got = append(got, fmt.Sprintf("%d payload=%t", dl.Msg.Offset, !dl.KeepUntil.IsZero()))
		}
		if want := "1 payload=false, 2 payload=true"; strings.Join(got, ", ") != want {
			t.Errorf("letters produced: %s, want %s", strings.Join(got, ", "), want)
		}
		if n := p.Stats().Totals().Erased; n != 1 {
			t.Errorf("erased %d, want u1's letter", n)
		}
		if src.committed() != 3 {
			t.Errorf("committed %d, want 3", src.committed())
		}
	})
}

// While the ledger is stale (it may be missing an erasure), dead letters
// wait as rows do, uncommitted; they go once it loads again.
func TestLettersWaitForAStaleLedger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stale atomic.Bool
		stale.Store(true)
		pcfg := DefaultConfig()
		pcfg.Erasures = func() *erasure.Ledger { return nil }
		pcfg.ErasuresHeld = func() error {
			if stale.Load() {
				return errors.New("the erasure ledger is stale")
			}
			return nil
		}
		src, dlq := newSource(good(0), "not json"), &fakeDLQ{}
		stop, _ := start(t, pcfg, src, &fakeWriter{}, dlq, func() *tenants.Config { return testConfig(t) })
		time.Sleep(5 * time.Second)
		synctest.Wait()
		dlq.mu.Lock()
		n := len(dlq.got)
		dlq.mu.Unlock()
		if n != 0 || src.committed() != 1 {
			t.Errorf("under a stale ledger: %d letters produced, %d committed; want 0 and 1", n, src.committed())
		}
		stale.Store(false)
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(dlq.got) != 1 || src.committed() != 2 {
			t.Errorf("once loaded: %d letters, %d committed; want 1 and 2", len(dlq.got), src.committed())
		}
	})
}
