package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/bttest"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
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
	logLevel   string
}

// runDemo runs the real pipeline against in-process Kafka (kfake) and an
// in-process Bigtable emulator (bttest), fed with synthetic clicks.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demoOptions
	f := newFlags("worker demo", "worker demo: the whole pipeline in one process, with in-process Kafka and Bigtable emulator and synthetic clicks.\nTenants (TTL): flash 5s, brief 15s, walk-in (unlisted: default 30s), keeper 45s. Ctrl-C stops it.", stderr)
	f.Int(&o.rate, "rate", "DEMO_RATE", 200, "synthetic clicks per second")
	f.Duration(&o.produceFor, "produce-for", "DEMO_PRODUCE_FOR", 10*time.Second, "produce for this long, then watch the cells expire")
	f.Duration(&o.every, "every", "DEMO_EVERY", 5*time.Second, "print the per-tenant summary this often")
	f.Duration(&o.runFor, "duration", "DEMO_DURATION", 0, "stop after this long (0: run until Ctrl-C)")
	f.String(&o.logLevel, "log-level", "LOG_LEVEL", "warn", "log level of the worker's own logs")
	if err := parse(f, args); err != nil {
		return err
	}
	if o.rate < 1 || o.every <= 0 {
		return &exitError{code: 2, err: errors.New("--rate and --every must be positive")}
	}
	log, err := newLogger(stderr, "text", o.logLevel)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if o.runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.runFor)
		defer cancel()
	}

	// bttest logs every cell its GC deletes through the standard logger:
	// thousands of lines that would bury the summary.
	stdlog.SetOutput(io.Discard)
	bt, err := bttest.NewServer("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start in-process Bigtable emulator: %w", err)
	}
	defer bt.Close()
	// The client library finds an emulator through this variable alone.
	if err := os.Setenv("BIGTABLE_EMULATOR_HOST", bt.Addr); err != nil {
		return err
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "clicks"), kfake.SeedTopics(1, "clicks.dlq"))
	if err != nil {
		return fmt.Errorf("start in-process Kafka: %w", err)
	}
	defer kc.Close()
	brokers := kc.ListenAddrs()

	cfg, err := tenants.Parse([]byte(demoTenants))
	if err != nil {
		return fmt.Errorf("demo tenants: %w", err)
	}
	ro := &runOptions{
		common:         common{project: "local", instance: "local", table: "clicks", family: "c"},
		topic:          "clicks",
		group:          "cellttl-demo",
		dlqTopic:       "clicks.dlq",
		commitInterval: time.Second,
		sessionTimeout: 30 * time.Second,
		writeTimeout:   30 * time.Second,
		pipe:           pipeline.DefaultConfig(),
	}
	dc, ac, err := ro.bigtableClients(ctx)
	if err != nil {
		return err
	}
	defer dc.Close()
	defer ac.Close()
	if _, err := sink.Setup(ctx, ac, dc, ro.target(), cfg.Policy.GCMaxAge(), sink.SetupOptions{}); err != nil {
		return fmt.Errorf("demo setup: %w", err)
	}
	fmt.Fprintf(stdout, "cellttl demo: Kafka (in-process) %s, Bigtable emulator (in-process) %s\n", brokers[0], bt.Addr)
	fmt.Fprintf(stdout, "table clicks, family c with GC rule %q (%s)\n", sink.DescribeGC(bigtable.MaxAgePolicy(cfg.Policy.GCMaxAge())), describePolicy(cfg.Policy))
	fmt.Fprintf(stdout, "producing %d clicks/s for %s (1 in 25 an hour old, 1 in 40 malformed), then watching GC; Ctrl-C stops\n\n", o.rate, duration.Format(o.produceFor))

	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	wg.Go(func() {
		if err := produceDemo(pctx, brokers, o.rate, o.produceFor); err != nil && pctx.Err() == nil {
			log.Error("demo producer stopped", "err", err)
		}
	})

	started := time.Now()
	var stats *pipeline.Stats
	statsReady := make(chan struct{})
	ro.onPipeline = func(p *pipeline.Pipeline) { stats = p.Stats(); close(statsReady) }
	sctx, stopSummaries := context.WithCancel(ctx)
	defer stopSummaries()
	wg.Go(func() {
		select {
		case <-statsReady:
		case <-sctx.Done():
			return
		}
		t := time.NewTicker(o.every)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				printSummary(sctx, stdout, dc.Open("clicks"), cfg.Policy, stats, time.Since(started))
			}
		}
	})
	err = serve(ctx, ro, brokers, cfg, dc, nil, log)
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
// rows a correct reader returns.
func printSummary(ctx context.Context, w io.Writer, tbl *bigtable.Table, p *expiry.Policy, stats *pipeline.Stats, elapsed time.Duration) {
	now := time.Now()
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "t+%s\ttenant\tttl\twritten\tskipped\tdead-lettered\tstored\tlive\tsample row (expiry)\n", elapsed.Truncate(time.Second))
	for _, id := range demoTenantIDs {
		ts := stats.Tenant(id)
		stored := countRows(ctx, tbl, id, nil)
		live := countRows(ctx, tbl, id, bigtable.TimestampRangeFilterMicros(bigtable.Timestamp(p.ReadFrom(now)), 0))
		sample := "-"
		if s, ok := ts.Sample(); ok {
			when := "expires in " + s.Expiry.Sub(now).Truncate(100*time.Millisecond).String()
			if expiry.Expired(s.Expiry, now) {
				when = "expired " + now.Sub(s.Expiry).Truncate(100*time.Millisecond).String() + " ago"
			}
			sample = fmt.Sprintf("%s (%s)", shorten(s.Key), when)
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", id, duration.Format(p.TTL(id)), ts.Written.Load(), ts.Expired.Load(), ts.DeadLettered.Load(), stored, live, sample)
	}
	if o := stats.Tenant(pipeline.OtherTenants); o.Consumed.Load() > 0 {
		fmt.Fprintf(tw, "\t(no valid tenant)\t\t%d\t%d\t%d\t\t\t\n", o.Written.Load(), o.Expired.Load(), o.DeadLettered.Load())
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func shorten(key string) string {
	if parts, err := rowkey.Parse(key); err == nil {
		return strings.Join([]string{parts.Tenant, "…", parts.User, fmt.Sprint(parts.Millis), parts.EventID}, "#")
	}
	return key
}

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
