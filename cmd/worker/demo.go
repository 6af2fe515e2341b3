//go:build !nodemo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/inproc"
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

// demoCmd is worker demo: the real worker against in-process Kafka and
// Bigtable (internal/inproc), fed with synthetic clicks.
type demoCmd struct {
	rate       int
	produceFor time.Duration
	every      time.Duration
	runFor     time.Duration
	watch      bool
	logLevel   string
}

func (o *demoCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker demo", "worker demo: the whole pipeline in one process, with in-process Kafka and Bigtable emulator and synthetic clicks.\n"+
		"Tenants (TTL): flash 5s, brief 15s, walk-in (unlisted: default 30s), keeper 45s. It ends when every tenant's cells are gone\n"+
		"(about a minute), unless --watch; Ctrl-C stops it.", out)
	f.Section("Demo")
	f.Int(&o.rate, "rate", "DEMO_RATE", 200, "synthetic clicks per second")
	f.Duration(&o.produceFor, "produce-for", "DEMO_PRODUCE_FOR", 10*time.Second, "produce for this long, then watch the cells expire")
	f.Duration(&o.every, "every", "DEMO_EVERY", 5*time.Second, "print the per-tenant summary this often")
	f.Duration(&o.runFor, "duration", "DEMO_DURATION", 0, "stop after this long (0: until every tenant's cells are gone, or Ctrl-C)")
	f.Bool(&o.watch, "watch", "DEMO_WATCH", false, "keep running once every tenant's cells are gone, until Ctrl-C")
	f.Choice(&o.logLevel, "log-level", "LOG_LEVEL", "warn", "log level of the worker's own logs", "debug", "info", "warn", "error")
	return f
}

// run starts the services in-process, produces, and prints the summaries
// until every tenant's cells are gone.
func (o *demoCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
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

	env, err := startDemo(ctx, stdout)
	if err != nil {
		return err
	}
	defer env.close()
	fmt.Fprintf(stdout, "producing %d clicks/s for %s (1 in 25 an hour old, 1 in 40 malformed), then watching GC until every tenant's cells are gone; Ctrl-C stops\n\n", o.rate, duration.Format(o.produceFor))

	w, err := newWorker(ctx, env.ro, env.cfg, env.dc, env.ac, nil, nil, log)
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
		if err := produceDemo(pctx, env.brokers, o.rate, o.produceFor); err != nil && pctx.Err() == nil {
			log.Error("demo producer stopped", "err", err)
		}
	})
	env.started = time.Now()
	wctx, done := context.WithCancel(ctx) // the worker's: done when every cell is gone
	defer done()
	sctx, stopSummaries := context.WithCancel(ctx)
	defer stopSummaries()
	wg.Go(func() { env.summaries(sctx, stdout, o, w.pipeline.Stats(), produced, done) })
	err = w.serve(wctx, nil)
	stopProducing()
	stopSummaries()
	wg.Wait() // the summaries write to stdout too
	fmt.Fprintln(stdout, "demo stopped")
	return err
}

// demoEnv is the demo's in-process services, set up for the worker.
type demoEnv struct {
	bt      *inproc.Bigtable
	kc      *inproc.Kafka
	brokers []string
	dc      *bigtable.Client
	ac      *bigtable.AdminClient
	cfg     *tenants.Config
	ro      *runCmd
	started time.Time
}

// startDemo starts in-process Kafka and Bigtable, creates the table and
// the erasure ledger, and says where they are on stdout.
func startDemo(ctx context.Context, stdout io.Writer) (_ *demoEnv, err error) {
	env := &demoEnv{}
	defer func() {
		if err != nil {
			env.close()
		}
	}()
	if env.bt, err = inproc.StartBigtable(inproc.BigtableOptions{Quiet: true}); err != nil {
		return nil, err
	}
	// The worker creates the dead-letter topic with its retention: made
	// here with the defaults (7 days), letters would keep no payload.
	if env.kc, err = inproc.StartKafka(inproc.KafkaOptions{Topics: []inproc.Topic{{Name: "clicks", Partitions: 3}}}); err != nil {
		return nil, err
	}
	env.brokers = env.kc.Brokers()
	if env.cfg, err = tenants.Parse([]byte(demoTenants)); err != nil {
		return nil, fmt.Errorf("demo tenants: %w", err)
	}
	env.ro = newRunCmd()
	env.ro.tenants.Path = "" // the demo's tenants are fixed: nothing to reload
	env.ro.admin.Addr = ""
	env.ro.kafka.Brokers, env.ro.kafka.Group = env.brokers, "cellttl-demo"
	if env.dc, env.ac, err = env.bt.Clients(ctx); err != nil {
		return nil, err
	}
	target := env.ro.table.Target()
	if _, err := sink.Setup(ctx, env.ac, env.dc, target, env.cfg.Policy.GCMaxAge(), sink.SetupOptions{}); err != nil {
		return nil, fmt.Errorf("demo setup: %w", err)
	}
	if err := setupRecord(ctx, env.ac, env.dc, target.Table, false, io.Discard); err != nil {
		return nil, fmt.Errorf("demo setup: %w", err)
	}
	// A new emulator: no event yet, no ledger to replace.
	ledger := sink.Target{Table: env.ro.table.ErasureTable(), Family: erasure.Family}
	if err := setupLedger(ctx, &session{cfg: env.cfg, dc: env.dc, ac: env.ac}, ledger, target, false, io.Discard); err != nil {
		return nil, fmt.Errorf("demo setup: %w", err)
	}
	fmt.Fprintf(stdout, "cellttl demo: Kafka (in-process) %s, Bigtable emulator (in-process) %s\n", env.brokers[0], env.bt.Addr())
	fmt.Fprintf(stdout, "table %s, family %s with GC rule %q (%s)\n", target.Table, target.Family, sink.DescribeGC(bigtable.MaxAgePolicy(env.cfg.Policy.GCMaxAge())), describePolicy(env.cfg.Policy))
	return env, nil
}

// close closes what startDemo opened.
func (env *demoEnv) close() {
	if env.dc != nil {
		env.dc.Close()
		env.ac.Close()
	}
	if env.kc != nil {
		env.kc.Close()
	}
	if env.bt != nil {
		env.bt.Close()
	}
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
