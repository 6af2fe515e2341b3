// Package bench is what `loadtest bench` measures, in one run against the
// real broker and emulator: the two ceilings of the worker's throughput
// (raw ApplyBulk, raw kafka-go consumption), the worker process itself
// (events per second, CPU per event, peak RSS, who used the cores), and the
// decomposition of its latency against raw ApplyBulk's.
package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/lab"
)

// Options is what the bench flags say.
type Options struct {
	Brokers        []string
	Events         int // events per measurement
	PayloadBytes   int
	Partitions     int
	Writers        int      // concurrent ApplyBulk calls of the raw Bigtable measurement
	Workers        []string // worker flags of each worker measurement ("": the defaults)
	TenantsFile    string
	TenantCount    int    // instead of TenantsFile, a generated file of this many tenants
	Baseline       string // another worker binary, timed interleaved with this build
	Rounds         int
	ProfileDir     string // where the first worker measurement's profiles go
	ProfileSeconds int
	Latency        time.Duration // how long to measure latency for (0: skip)
	LatencyRate    int           // 0: half the maximum
	// Shape lays the events out (the contract when unset); its worker
	// flags are not added: each --worker says what it reads, so that one
	// run can time the same events with and without them.
	Shape synth.Shape
}

// Run measures, in one run against the real broker and emulator, the
// two ceilings and the worker: (a) raw ApplyBulk of the rows the events
// become, no Kafka; (b) raw kafka-go consumer-group consumption of the
// events, no Bigtable; (c) the worker, once per set of worker flags.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if o.TenantCount > 0 {
		dir, err := os.MkdirTemp("", "cellttl-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if o.TenantsFile, err = manyTenants(dir, o.TenantCount); err != nil {
			return err
		}
	}
	cfg, err := tenants.Load(o.TenantsFile)
	if err != nil {
		return err
	}
	m, run, msgs, recs, err := events(o, cfg)
	if err != nil {
		return err
	}
	values := make([][]byte, len(msgs))
	for i := range msgs {
		values[i] = msgs[i].Value
	}
	fmt.Fprintf(stdout, "bench %s: %d events of %d bytes, %d partitions, %d tenants\n", run, o.Events, len(values[0]), o.Partitions, len(m.Tenants()))

	a, err := benchApplyBulk(ctx, cfg.Policy, m, values, recs, o.Writers)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "(a) raw ApplyBulk, %d writers, batches of 1000:  %9.0f rows/s      %5.2f µs CPU/event (client side)\n", o.Writers, a.rate, a.cpuPerEvent)
	fmt.Fprintf(stdout, "    cores: %s\n", a.cores)

	topic := run + "-raw"
	if err := lab.CreateTopic(ctx, o.Brokers, topic, o.Partitions, nil); err != nil {
		return err
	}
	if err := produceAll(ctx, o.Brokers, topic, msgs); err != nil {
		return err
	}
	b, err := benchConsume(ctx, o.Brokers, topic, len(values))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "(b) raw kafka-go consumer group:              %9.0f messages/s  %5.2f µs CPU/event\n", b.rate, b.cpuPerEvent)
	fmt.Fprintf(stdout, "    cores: %s\n", b.cores)
	ceiling := min(a.rate, b.rate)
	floor := a.cpuPerEvent + b.cpuPerEvent
	fmt.Fprintf(stdout, "    floor (a) + (b):                                              %5.2f µs CPU/event\n", floor)

	bin, remove, err := buildWorker(ctx)
	if err != nil {
		return err
	}
	defer remove()
	best, err := benchWorkers(ctx, o, stdout, bin, run, msgs, ceiling, floor)
	if err != nil {
		return err
	}
	if o.Latency > 0 {
		return benchLatency(ctx, stdout, cfg, m, run, bin, o.Brokers, o.TenantsFile, o.Partitions, o.PayloadBytes, o.LatencyRate, best, o.Latency)
	}
	return nil
}

// events makes the run's events, of the tenants cfg lists.
func events(o Options, cfg *tenants.Config) (m synth.Mix, run string, msgs []kafka.Message, recs []synth.Sent, err error) {
	if m, err = synth.ParseMix(slices.Collect(maps.Keys(cfg.Policy.Tenants)), ""); err != nil {
		return synth.Mix{}, "", nil, nil, err
	}
	run = fmt.Sprintf("b%x", time.Now().UnixNano()/1e6%0xffffff)
	gen := synth.New(synth.Config{Run: run, Mix: m, Shape: o.Shape, PayloadBytes: o.PayloadBytes, Seed: 1})
	now := time.Now()
	msgs = make([]kafka.Message, o.Events)
	recs = make([]synth.Sent, o.Events)
	for i := range msgs {
		msgs[i], recs[i] = gen.Next(i, now)
	}
	return m, run, msgs, recs, nil
}

// benchWorkers runs the worker built at bin, and the baseline's, on msgs
// with each set of flags, o.Rounds times, and returns the best rate of
// this build with the first set.
func benchWorkers(ctx context.Context, o Options, stdout io.Writer, bin, run string, msgs []kafka.Message, ceiling, floor float64) (float64, error) {
	builds := []struct{ name, bin string }{{"this build", bin}}
	if o.Baseline != "" {
		builds = append(builds, struct{ name, bin string }{"baseline " + filepath.Base(o.Baseline), o.Baseline})
	}
	n := 0
	best := 0.0 // of this build, first set of flags
	for ci, flags := range o.Workers {
		label := flags
		if label == "" {
			label = "defaults"
		}
		for round := range o.Rounds {
			for _, b := range builds {
				prof := ""
				if n == 0 {
					prof = o.ProfileDir
				}
				c, err := benchWorker(ctx, b.bin, o.Brokers, o.TenantsFile, fmt.Sprintf("%s-w%d", run, n), o.Partitions, msgs, flags, prof, o.ProfileSeconds)
				n++
				if err != nil {
					return 0, err
				}
				if ci == 0 && b.bin == bin {
					best = max(best, c.rate)
				}
				fmt.Fprintf(stdout, "(c) worker, %s (%s), round %d: %9.0f events/s = %.2f × min(a, b); %5.2f µs CPU/event = %.2f × floor; peak RSS %d MiB\n",
					b.name, label, round+1, c.rate, c.rate/ceiling, c.cpuPerEvent, c.cpuPerEvent/floor, c.rss>>20)
				fmt.Fprintf(stdout, "    cores: %s\n", c.cores)
				if c.steady > 0 {
					fmt.Fprintf(stdout, "    after its first 2 s: %.0f events/s\n", c.steady)
				}
			}
		}
	}
	return best, nil
}

// manyTenants writes a tenants file of n tenants into dir.
func manyTenants(dir string, n int) (string, error) {
	var b strings.Builder
	b.WriteString("strategy: default-expiration\ndefault_ttl: 2d\nrecord_real_timestamp: true\ntenants:\n")
	ttls := []string{"1h", "12h", "2d", "3d", "7d"}
	for i := range n {
		fmt.Fprintf(&b, "  t%05d: %s\n", i, ttls[i%len(ttls)])
	}
	file := filepath.Join(dir, "tenants.yaml")
	return file, os.WriteFile(file, []byte(b.String()), 0o644)
}
