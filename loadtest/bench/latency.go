package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/loadtest/drive"
	"github.com/cellttl/cellttl/loadtest/report"
	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/loadtest/verify"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/lab"
)

// dist summarises a latency distribution.
type dist struct{ p50, p99, max time.Duration }

func distOf(d []time.Duration) dist {
	if len(d) == 0 {
		return dist{}
	}
	sortDurations(d)
	return dist{percentile(d, 0.50), percentile(d, 0.99), d[len(d)-1]}
}

func (d dist) String() string {
	r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	return fmt.Sprintf("p50 %6s  p99 %6s  max %6s", r(d.p50), r(d.p99), r(d.max))
}

// latencyPhase is one half of the latency decomposition: its distribution
// and who used the two cores meanwhile.
type latencyPhase struct {
	dist dist
	cpu  string
	rate float64 // rows written per second
	// the ApplyBulk (MutateRows) calls, each counted once: timed here for
	// raw writes, from its histogram's buckets for the worker
	applyP50, applyP99 time.Duration
}

// benchLatency measures, each at rate events/s for d, the raw ApplyBulk
// latency of batches formed as the worker forms them by default, and the
// worker's produce → ack latency, and prints them with the target: worker
// p99 ≤ raw p99 + --flush-interval + 20 ms. Rate 0 is half of what raw
// ApplyBulk sustains for d (the emulator slows as its table grows, so a
// short run's rate is more than it keeps up), or of best, if lower.
func benchLatency(ctx context.Context, stdout io.Writer, cfg *tenants.Config, m synth.Mix, run, bin string, brokers []string, tenantsFile string, partitions, payload, rate int, best float64, d time.Duration) error {
	p := cfg.Policy
	def := pipeline.DefaultConfig()
	if rate == 0 {
		full, err := rawLatency(ctx, p, m, run+"-max", payload, 0, d, def)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "raw ApplyBulk sustained for %s: %.0f rows/s   CPU: %s\n", d, full.rate, full.cpu)
		rate = int(min(full.rate, best) / 2)
	}
	fmt.Fprintf(stdout, "latency at %d events/s for %s (half the maximum); batches of %d rows or %s, %d writers:\n", rate, d, def.FlushRows, def.FlushInterval, def.Writers)
	raw, err := rawLatency(ctx, p, m, run, payload, rate, d, def)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "    raw ApplyBulk, flush to ack:            %s   calls p50 %s p99 %s   CPU: %s\n", raw.dist,
		raw.applyP50.Round(time.Millisecond), raw.applyP99.Round(time.Millisecond), raw.cpu)
	wk, err := workerLatency(ctx, run+"-lat", bin, brokers, cfg, m, tenantsFile, partitions, payload, rate, d)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "    worker, produce to ack (written_at):    %s   calls p50 %s p99 %s (its histogram)   CPU: %s\n", wk.dist,
		wk.applyP50.Round(time.Millisecond), wk.applyP99.Round(time.Millisecond), wk.cpu)
	// Raw again, while the load generator produces the same stream to a
	// topic nobody reads: the broker's share of the cores, as the worker's
	// run had it, without the worker. The two raw runs bracket the
	// worker's: an emulator that slows as the runs go shows as a
	// difference between them.
	bg := run + "-bg"
	if err := lab.CreateTopic(ctx, brokers, bg, partitions, nil); err != nil {
		return err
	}
	bgo := &drive.Options{Brokers: brokers, Topic: bg, Rate: rate, Duration: d}
	bgErr := make(chan error, 1)
	go func() {
		var n atomic.Int64
		_, err := drive.Produce(ctx, bgo, synth.New(synth.Config{Run: bg, Mix: m, PayloadBytes: payload, Seed: 3}), &n)
		bgErr <- err
	}()
	loaded, err := rawLatency(ctx, p, m, run+"-loaded", payload, rate, d, def)
	if err := errors.Join(err, <-bgErr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "    raw ApplyBulk, producing beside it:     %s   calls p50 %s p99 %s   CPU: %s\n", loaded.dist,
		loaded.applyP50.Round(time.Millisecond), loaded.applyP99.Round(time.Millisecond), loaded.cpu)
	for _, r := range []struct {
		name string
		p99  time.Duration
	}{{"raw", raw.dist.p99}, {"raw beside the producer", loaded.dist.p99}} {
		bound := r.p99 + def.FlushInterval + 20*time.Millisecond
		verdict := "met"
		if wk.dist.p99 > bound {
			verdict = "missed"
		}
		fmt.Fprintf(stdout, "    target worker p99 ≤ %s p99 + %s + 20ms = %s: %s (worker p99 − %s p99 = %s)\n",
			r.name, def.FlushInterval, bound.Round(time.Millisecond), verdict, r.name, (wk.dist.p99 - r.p99).Round(time.Millisecond))
	}
	return nil
}

// rawLatency writes rows at rate for d with the client's ApplyBulk alone,
// batched as the worker batches (a batch goes at FlushRows rows or when its
// first row is FlushInterval old) and written by as many concurrent calls
// as the worker's writers. Each row counts the time from its batch's flush
// to the call's return, a wait for a free writer included: the latency the
// worker's writes cannot go below.
func rawLatency(ctx context.Context, p *expiry.Policy, m synth.Mix, run string, payload, rate int, d time.Duration, def pipeline.Config) (latencyPhase, error) {
	tbl, family, cleanup, err := benchTable(ctx, p)
	if err != nil {
		return latencyPhase{}, err
	}
	defer cleanup()
	gen := synth.New(synth.Config{Run: run + "-raw", Mix: m, PayloadBytes: payload, Seed: 2})
	jobs := make(chan rawBatch)
	ws := &rawWriters{tbl: tbl, family: family}
	var wg sync.WaitGroup
	for range def.Writers {
		wg.Go(func() { ws.run(ctx, jobs) })
	}
	watch := watchCPU(0)
	const step = 5 * time.Millisecond
	var cur []sink.Row
	var first time.Time
	seq, budget := 0, 0.0
	start := time.Now()
	end := start.Add(d)
	// Each step's rows arrive at its scheduled time, and a batch is due at
	// the scheduled time it filled or aged: a writer that is late to take it
	// counts against the latency, as it would in the worker. At rate 0 a
	// batch is due as soon as a writer is free: the sustained maximum.
	for at := start; at.Before(end) && ctx.Err() == nil; at = at.Add(step) {
		if rate > 0 {
			time.Sleep(time.Until(at))
			budget += float64(rate) * step.Seconds()
		} else {
			at = time.Now()
			budget += float64(def.FlushRows)
		}
		for ; budget >= 1; budget-- {
			msg, r := gen.Next(seq, at)
			cur = append(cur, benchRow(p, m, seq, r, msg.Value))
			seq++
			if len(cur) == 1 {
				first = at
			}
			if len(cur) >= def.FlushRows {
				jobs <- rawBatch{cur, at}
				cur = nil
			}
		}
		if len(cur) > 0 && at.Sub(first) >= def.FlushInterval {
			jobs <- rawBatch{cur, first.Add(def.FlushInterval)}
			cur = nil
		}
	}
	if len(cur) > 0 {
		jobs <- rawBatch{cur, time.Now()}
	}
	close(jobs)
	wg.Wait()
	if ws.err != nil {
		return latencyPhase{}, ws.err
	}
	cd := distOf(ws.calls)
	return latencyPhase{dist: distOf(ws.lat), cpu: watch.shares(), rate: float64(len(ws.lat)) / time.Since(start).Seconds(), applyP50: cd.p50, applyP99: cd.p99}, nil
}

// rawBatch is a batch of the raw phase, and when it was due.
type rawBatch struct {
	rows []sink.Row
	due  time.Time
}

// rawWriters write the raw phase's batches, timing each row from when its
// batch was due and each call, and keep the first error.
type rawWriters struct {
	tbl    *bigtable.Table
	family string

	mu         sync.Mutex
	lat, calls []time.Duration
	err        error
}

// run writes the batches of jobs until it is closed.
func (w *rawWriters) run(ctx context.Context, jobs <-chan rawBatch) {
	for j := range jobs {
		start := time.Now()
		err := applyBulk(ctx, w.tbl, w.family, j.rows)
		took := time.Since(j.due)
		w.mu.Lock()
		w.calls = append(w.calls, time.Since(start))
		for range j.rows {
			w.lat = append(w.lat, took)
		}
		if err != nil && w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
}

// workerLatency starts a worker on an empty topic, produces to it at rate
// for d with the load generator, and reads every event's produce → ack
// latency back from its written_at column (verifying the rows on the way).
func workerLatency(ctx context.Context, name, bin string, brokers []string, cfg *tenants.Config, m synth.Mix, tenantsFile string, partitions, payload, rate int, d time.Duration) (latencyPhase, error) {
	if err := lab.CreateTopic(ctx, brokers, name, partitions, nil); err != nil {
		return latencyPhase{}, err
	}
	w, err := startWorker(ctx, bin, brokers, tenantsFile, name, "")
	if err != nil {
		return latencyPhase{}, err
	}
	defer w.stop(ctx)
	deadline := time.Now().Add(time.Minute)
	for {
		if t, err := w.Status(ctx); err == nil && t.Reading {
			break
		}
		if time.Now().After(deadline) {
			return latencyPhase{}, fmt.Errorf("the worker did not join its group within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	load := &drive.Options{
		Brokers: brokers, Topic: name, Mix: m, Shape: synth.Contract(), Rate: rate, Duration: d,
		Users: synth.DefaultUsers, ZipfS: synth.DefaultZipfS, PayloadBytes: payload, StatusURL: w.Admin + "/status?tenants=false", Settle: 2 * time.Minute,
	}
	const applyBulk = "db_client_operation_duration_seconds" // one MutateRows call of the worker
	before, err := scrapeHistogram(ctx, w.Admin+"/metrics", applyBulk)
	if err != nil {
		return latencyPhase{}, err
	}
	watch := watchCPU(w.Pid())
	res, err := drive.Run(ctx, load, io.Discard)
	if err == nil {
		// The run's report, as every load test leaves one.
		_, err = report.Write(report.Run{Dir: filepath.Join("loadtest-report", name), Load: load, Result: res})
	}
	if err != nil {
		return latencyPhase{}, fmt.Errorf("worker at %d events/s: %w", rate, err)
	}
	// From the first event produced to the worker caught up; not the
	// verification, which reads every row back.
	ph := latencyPhase{cpu: watch.shares()}
	after, err := scrapeHistogram(ctx, w.Admin+"/metrics", applyBulk)
	if err != nil {
		return latencyPhase{}, err
	}
	ph.applyP50, ph.applyP99 = after.quantile(before, 0.50), after.quantile(before, 0.99)
	c, err := verify.Run(ctx, verify.Options{Brokers: brokers, DLQTopic: name + ".dlq", Project: "local", Instance: "local", Table: w.table, Family: "c"}, cfg, res.Gen, res.Recs)
	if err != nil {
		return latencyPhase{}, err
	}
	if !c.OK() {
		return latencyPhase{}, fmt.Errorf("%w: %s", verify.ErrMismatch, c.Summary())
	}
	ph.dist = distOf(c.Latencies)
	return ph, nil
}

// cpuWatch measures who used the CPU during a phase: the Bigtable emulator
// and the Kafka broker (their pid files in the services directory), the
// worker, and this process.
type cpuWatch struct {
	at    time.Time
	procs []watched
	self  time.Duration
}

type watched struct {
	name string
	pid  int
	cpu  time.Duration
}

func watchCPU(worker int) *cpuWatch {
	w := &cpuWatch{at: time.Now(), self: lab.SelfCPU()}
	for _, s := range []struct{ name, service string }{{"emulator", "emulator"}, {"broker", "kafka"}} {
		if pid := lab.ServicePid(s.service); pid != 0 {
			w.procs = append(w.procs, watched{name: s.name, pid: pid})
		}
	}
	if worker != 0 {
		w.procs = append(w.procs, watched{name: "worker", pid: worker})
	}
	for i := range w.procs {
		w.procs[i].cpu, _ = lab.CPU(w.procs[i].pid)
	}
	return w
}

// shares says how much of a core each used since the watch began.
func (w *cpuWatch) shares() string {
	wall := time.Since(w.at).Seconds()
	var parts []string
	for _, p := range w.procs {
		if c, err := lab.CPU(p.pid); err == nil {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", p.name, 100*(c-p.cpu).Seconds()/wall))
		}
	}
	parts = append(parts, fmt.Sprintf("bench %.0f%%", 100*(lab.SelfCPU()-w.self).Seconds()/wall))
	return strings.Join(parts, ", ") + " of a core"
}

// histogram is a Prometheus histogram's cumulative bucket counts, summed
// over its series, by upper bound.
type histogram map[float64]float64

// scrapeHistogram reads the buckets of metric from a /metrics page.
func scrapeHistogram(ctx context.Context, url, metric string) (histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	h := histogram{}
	if f := fams[metric]; f != nil {
		for _, m := range f.GetMetric() {
			// The text format's buckets hold +Inf; the count is the same.
			for _, b := range m.GetHistogram().GetBucket() {
				h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
	}
	return h, nil
}

// quantile estimates the q-quantile of what was observed between before
// and h, as Prometheus's histogram_quantile does: linearly within the
// bucket it falls in.
func (h histogram) quantile(before histogram, q float64) time.Duration {
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0
	}
	total := h[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, le := range bounds {
		n := h[le] - before[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return time.Duration(lower * float64(time.Second)) // beyond the last bound: its lower edge
			}
			frac := (rank - below) / max(n-below, 1)
			return time.Duration((lower + (le-lower)*frac) * float64(time.Second))
		}
		lower, below = le, n
	}
	return 0
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}
