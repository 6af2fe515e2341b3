//go:build !nodemo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/reader"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/telemetry"
	"github.com/cellttl/cellttl/tenants"
)

// demoTenants are TTLs of seconds, so that a person watching sees each
// tenant's cells disappear through the emulator's own GC within a minute.
// walk-in is not listed and gets the default.
const demoTenants = `strategy: default-expiration
default_ttl: 30s
record_real_timestamp: true
tenants:
  flash: 5s
  brief: 15s
  keeper: 45s
`

var demoTenantIDs = []string{"flash", "brief", "walk-in", "keeper"}

type demoOptions struct {
	rate       int
	produceFor time.Duration
	every      time.Duration
	runFor     time.Duration
	watch      bool
	logLevel   string
}

// runDemo runs the real worker against in-process Kafka and Bigtable
// (internal/inproc), fed with synthetic clicks.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demoOptions
	f := envflag.New("worker demo", "worker demo: the whole pipeline in one process, with in-process Kafka and Bigtable emulator and synthetic clicks.\n"+
		"Tenants (TTL): flash 5s, brief 15s, walk-in (unlisted: default 30s), keeper 45s. It ends when every tenant's cells are gone\n"+
		"(about a minute), unless --watch; Ctrl-C stops it.", stderr)
	f.Int(&o.rate, "rate", "DEMO_RATE", 200, "synthetic clicks per second")
	f.Duration(&o.produceFor, "produce-for", "DEMO_PRODUCE_FOR", 10*time.Second, "produce for this long, then watch the cells expire")
	f.Duration(&o.every, "every", "DEMO_EVERY", 5*time.Second, "print the per-tenant summary this often")
	f.Duration(&o.runFor, "duration", "DEMO_DURATION", 0, "stop after this long (0: until every tenant's cells are gone, or Ctrl-C)")
	f.Bool(&o.watch, "watch", "DEMO_WATCH", false, "keep running once every tenant's cells are gone, until Ctrl-C")
	f.String(&o.logLevel, "log-level", "LOG_LEVEL", "warn", "log level of the worker's own logs")
	if err := parse(f, args); err != nil {
		return err
	}
	if o.rate < 1 || o.every <= 0 {
		return usageError(errors.New("--rate and --every must be positive"))
	}
	log, err := telemetry.LogConfig{Format: "text", Level: o.logLevel}.Logger(stderr)
	if err != nil {
		return usageError(err)
	}
	if o.runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.runFor)
		defer cancel()
	}

	bt, err := inproc.StartBigtable(inproc.BigtableOptions{Quiet: true})
	if err != nil {
		return err
	}
	defer bt.Close()
	// The worker creates the dead-letter topic with its retention: made
	// here with the defaults (7 days), letters would keep no payload.
	kc, err := inproc.StartKafka(inproc.KafkaOptions{Topics: []inproc.Topic{{Name: "clicks", Partitions: 3}}})
	if err != nil {
		return err
	}
	defer kc.Close()
	brokers := kc.Brokers()

	cfg, err := tenants.Parse([]byte(demoTenants))
	if err != nil {
		return fmt.Errorf("demo tenants: %w", err)
	}
	ro := defaultRunOptions()
	ro.tenants.Path = "" // the demo's tenants are fixed: nothing to reload
	ro.admin.Addr = ""
	ro.kafka.Brokers, ro.kafka.Group = brokers, "cellttl-demo"
	dc, ac, err := bt.Clients(ctx)
	if err != nil {
		return err
	}
	defer dc.Close()
	defer ac.Close()
	target := ro.table.Target()
	if _, err := sink.Setup(ctx, ac, dc, target, cfg.Policy.GCMaxAge(), sink.SetupOptions{}); err != nil {
		return fmt.Errorf("demo setup: %w", err)
	}
	if err := setupLedger(ctx, &session{cfg: cfg, dc: dc, ac: ac}, ro.table.ErasureTable(), io.Discard); err != nil {
		return fmt.Errorf("demo setup: %w", err)
	}
	fmt.Fprintf(stdout, "cellttl demo: Kafka (in-process) %s, Bigtable emulator (in-process) %s\n", brokers[0], bt.Addr())
	fmt.Fprintf(stdout, "table %s, family %s with GC rule %q (%s)\n", target.Table, target.Family, sink.DescribeGC(bigtable.MaxAgePolicy(cfg.Policy.GCMaxAge())), describePolicy(cfg.Policy))
	fmt.Fprintf(stdout, "producing %d clicks/s for %s (1 in 25 an hour old, 1 in 40 malformed), then watching GC until every tenant's cells are gone; Ctrl-C stops\n\n", o.rate, duration.Format(o.produceFor))

	w, err := newWorker(ctx, &ro, cfg, dc, ac, nil, log)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	produced := make(chan struct{})
	wg.Go(func() {
		defer close(produced)
		if err := produceDemo(pctx, brokers, o.rate, o.produceFor); err != nil && pctx.Err() == nil {
			log.Error("demo producer stopped", "err", err)
		}
	})
	started := time.Now()
	wctx, done := context.WithCancel(ctx) // the worker's: done when every cell is gone
	defer done()
	sctx, stopSummaries := context.WithCancel(ctx)
	defer stopSummaries()
	wg.Go(func() {
		t := time.NewTicker(o.every)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			tbl := dc.Open(target.Table)
			stored := printSummary(sctx, stdout, tbl, target.Family, cfg.Policy, w.pipeline.Stats(), time.Since(started))
			select {
			case <-produced:
			default:
				continue // still producing
			}
			if stored == 0 && !o.watch && w.pipeline.Stats().Totals().Written > 0 {
				fmt.Fprintf(stdout, "t+%s: every tenant's cells are gone, each collected by the emulator's own GC after its TTL: the demo is done (--watch keeps it running)\n",
					time.Since(started).Truncate(time.Second))
				done()
				return
			}
		}
	})
	err = w.serve(wctx, nil)
	stopProducing()
	stopSummaries()
	wg.Wait() // the summaries write to stdout too
	fmt.Fprintln(stdout, "demo stopped")
	return err
}

// produceDemo writes synthetic clicks at rate per second for d.
func produceDemo(ctx context.Context, brokers []string, rate int, d time.Duration) error {
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "clicks", Balancer: &kafka.Hash{}, BatchTimeout: 10 * time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: tr}
	defer w.Close()
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(d)
	n := 0
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		batch := make([]kafka.Message, 0, rate/10+1)
		for range max(1, rate/10) {
			n++
			tenant := demoTenantIDs[r.IntN(len(demoTenantIDs))]
			at := time.Now()
			switch {
			case n%40 == 0:
				batch = append(batch, kafka.Message{Value: []byte(fmt.Sprintf(`{"event_id":"d-%d","tenant_id":"%s","occurred_at":"not a time"}`, n, tenant))})
				continue
			case n%25 == 0:
				at = at.Add(-time.Hour) // expired on arrival for every demo tenant
			}
			user := fmt.Sprintf("u-%d", r.IntN(50))
			v := fmt.Sprintf(`{"event_id":"d-%d","tenant_id":"%s","user_id":"%s","occurred_at":"%s","page":"/p/%d"}`, n, tenant, user, at.UTC().Format(time.RFC3339Nano), r.IntN(10))
			batch = append(batch, kafka.Message{Key: []byte(user), Value: []byte(v)})
		}
		if err := w.WriteMessages(ctx, batch...); err != nil {
			return fmt.Errorf("produce demo clicks: %w", err)
		}
	}
	return nil
}

// printSummary prints, per tenant, what the worker did and what the table
// holds now: stored counts every row GC has not yet removed, live only the
// rows a correct reader returns (reader.Filter), and the first live row
// with its expiry.
func printSummary(ctx context.Context, w io.Writer, tbl *bigtable.Table, family string, p *expiry.Policy, stats *pipeline.Stats, elapsed time.Duration) (stored int) {
	now := time.Now()
	r := reader.New(tbl, family, p)
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "t+%s\ttenant\tttl\twritten\tskipped\tdead-lettered\tstored\tlive\tsample row (expiry)\n", elapsed.Truncate(time.Second))
	for _, id := range demoTenantIDs {
		ts := stats.Tenant(id)
		n := countRows(ctx, tbl, id, nil)
		if n < 0 {
			stored++ // a count that failed is not "none"
		} else {
			stored += n
		}
		live := countRows(ctx, tbl, id, reader.Filter(p, family, now))
		sample := "-"
		_ = r.Read(ctx, reader.Query{Tenant: id, Limit: 1}, func(ev reader.Event) bool {
			sample = fmt.Sprintf("%s (expires in %s)", shorten(ev.Key), ev.Expiry.Sub(now).Truncate(100*time.Millisecond))
			return false
		})
		fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", id, duration.Format(p.TTL(id)), ts.Written.Load(), ts.Expired.Load(), ts.DeadLettered.Load(), n, live, sample)
	}
	if o := stats.Tenant(pipeline.OtherTenants); o.Consumed.Load() > 0 {
		fmt.Fprintf(tw, "\t(no valid tenant)\t\t%d\t%d\t%d\t\t\t\n", o.Written.Load(), o.Expired.Load(), o.DeadLettered.Load())
	}
	tw.Flush()
	fmt.Fprintln(w)
	return stored
}

func shorten(key string) string {
	if parts, err := rowkey.Parse(key); err == nil {
		return strings.Join([]string{parts.Tenant, "…", parts.User, fmt.Sprint(parts.Millis), parts.EventID}, "#")
	}
	return key
}

// countRows counts a tenant's rows that pass f (every stored row when f is
// nil).
func countRows(ctx context.Context, tbl *bigtable.Table, tenant string, f bigtable.Filter) int {
	filter := bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	if f != nil {
		filter = bigtable.ChainFilters(f, filter)
	}
	n := 0
	err := tbl.ReadRows(ctx, bigtable.PrefixRange(rowkey.TenantPrefix(tenant)), func(bigtable.Row) bool { n++; return true }, bigtable.RowFilter(filter))
	if err != nil {
		return -1
	}
	return n
}
