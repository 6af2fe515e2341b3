package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/tenants"
)

// sample is one second of the run.
type sample struct {
	at                           time.Duration
	produced, written, dead, lag int64
	producedRate, writtenRate    float64
	workerReachable              bool
}

// workerStatus is the part of the worker's /status the load test reads.
type workerStatus struct {
	Lag   int64 `json:"lag"`
	Kafka struct {
		Joined     bool       `json:"joined"`
		Partitions []struct{} `json:"partitions"`
	} `json:"kafka"`
	Events map[string]eventTotals `json:"events"`
	// Totals is the sum of Events; the brief page (?tenants=false) has
	// only it.
	Totals *eventTotals `json:"totals"`
}

type eventTotals struct {
	Written      int64 `json:"written"`
	DeadLettered int64 `json:"dead_lettered"`
	Expired      int64 `json:"expired"`
}

type totals struct {
	written, dead, expired, lag int64
	// reading: the worker joined the group and owns partitions.
	reading bool
}

func fetchStatus(ctx context.Context, url string) (totals, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return totals{}, err
	}
	defer resp.Body.Close()
	var s workerStatus
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return totals{}, fmt.Errorf("worker status: %w", err)
	}
	t := totals{lag: s.Lag, reading: s.Kafka.Joined && len(s.Kafka.Partitions) > 0}
	if e := s.Totals; e != nil {
		t.written, t.dead, t.expired = e.Written, e.DeadLettered, e.Expired
		return t, nil
	}
	for _, e := range s.Events { // a worker from before the totals
		t.written += e.Written
		t.dead += e.DeadLettered
		t.expired += e.Expired
	}
	return t, nil
}

// loadTest produces, follows the worker until it caught up, verifies and
// writes the report; it returns the run's result.
func loadTest(ctx context.Context, o *options, brokers []string, stdout io.Writer, log *slog.Logger) (*result, error) {
	cfg, err := tenants.Load(o.tenantsFile)
	if err != nil {
		return nil, err
	}
	listed := make([]string, 0, len(cfg.Policy.Tenants))
	for t := range cfg.Policy.Tenants {
		listed = append(listed, t)
	}
	m, err := parseMix(listed, o.weights)
	if err != nil {
		return nil, err
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	runID := fmt.Sprintf("lt%x", time.Now().UnixNano()/1e6%0xffffffff)
	gen := newGenerator(runID, m, o.shape, max(o.users, 2), max(o.zipfS, 1.0001), o.payloadBytes, o.malformed, o.seed)
	if o.reportDir == "" {
		o.reportDir = filepath.Join("loadtest-report", runID)
	}
	if len(o.shape.workerFlags) > 0 {
		fmt.Fprintf(stdout, "events in the %s shape: the worker reads them with %s\n", o.shape.name, strings.Join(o.shape.workerFlags, " "))
	}

	// The worker's counters are cumulative: measure from here.
	var base totals
	deadline := time.Now().Add(60 * time.Second)
	for {
		if base, err = fetchStatus(ctx, o.statusURL); err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the worker's status at %s does not answer: %w", o.statusURL, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Fprintf(stdout, "run %s: producing to %s (%s), tenants %v, rate %s, %s\n", runID, o.topic, strings.Join(brokers, ","), m.tenants, rateText(o.rate), amountText(o))

	var produced atomic.Int64
	var recs []record
	var prodErr error
	prodDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(prodDone)
		recs, prodErr = produce(ctx, o, brokers, gen, &produced)
	}()

	var samples []sample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last sample
	producing := true
	var settleDeadline time.Time
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-prodDone:
			if producing {
				producing = false
				settleDeadline = time.Now().Add(o.settle)
				if prodErr != nil {
					return nil, prodErr
				}
			}
			prodDone = nil
			continue
		case <-tick.C:
		}
		s := sample{at: time.Since(start), produced: produced.Load()}
		t, err := fetchStatus(ctx, o.statusURL)
		if err == nil {
			s.workerReachable = true
			s.written, s.dead, s.lag = t.written-base.written, t.dead-base.dead, t.lag
			if !producing && t.written-base.written+t.dead-base.dead+t.expired-base.expired >= s.produced {
				samples = append(samples, rates(s, last))
				printSample(stdout, samples[len(samples)-1])
				break
			}
		} else {
			s.written, s.dead, s.lag = last.written, last.dead, last.lag
		}
		s = rates(s, last)
		samples = append(samples, s)
		last = s
		printSample(stdout, s)
		if !producing && time.Now().After(settleDeadline) {
			fmt.Fprintf(stdout, "the worker did not catch up within %s\n", o.settle)
			break
		}
	}
	elapsed := time.Since(start)
	res := result{runID: runID, opts: o, samples: samples, produced: int64(len(recs)), elapsed: elapsed, mix: m, gen: gen, recs: recs}
	for _, r := range recs {
		if !r.valid {
			res.invalid++
		}
	}
	if o.verify {
		fmt.Fprintln(stdout, "verifying through the reader and the dead-letter topic...")
		res.check, err = verify(ctx, o, brokers, cfg, gen, recs)
		if err != nil {
			return nil, err
		}
	}
	path, err := writeReport(&res)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "report: %s\n", path)
	if o.verify {
		fmt.Fprintln(stdout, res.check.summary())
		if !res.check.ok() {
			return &res, errMismatch
		}
	}
	return &res, nil
}

func rates(s, last sample) sample {
	dt := (s.at - last.at).Seconds()
	if dt > 0 {
		s.producedRate = float64(s.produced-last.produced) / dt
		s.writtenRate = float64(s.written-last.written) / dt
	}
	return s
}

func printSample(w io.Writer, s sample) {
	fmt.Fprintf(w, "t=%4ds produced %9d (%7.0f/s)  written %9d (%7.0f/s)  dead-lettered %6d  lag %8d\n",
		int(s.at.Seconds()+0.5), s.produced, s.producedRate, s.written, s.writtenRate, s.dead, s.lag)
}

func rateText(r int) string {
	if r == 0 {
		return "as fast as possible"
	}
	return fmt.Sprintf("%d/s", r)
}

func amountText(o *options) string {
	if o.count > 0 {
		return fmt.Sprintf("%d events", o.count)
	}
	return "for " + o.duration.String()
}

// produce writes events until the count or the duration is reached and
// returns what it produced.
func produce(ctx context.Context, o *options, brokers []string, g *generator, produced *atomic.Int64) ([]record, error) {
	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        o.topic,
		Balancer:     &kafka.Hash{},
		BatchSize:    1000,
		BatchTimeout: 2 * time.Millisecond,
		RequiredAcks: kafka.RequireAll,
		Transport:    &kafka.Transport{},
	}
	defer w.Close()
	var recs []record
	if o.count > 0 {
		recs = make([]record, 0, o.count)
	}
	end := time.Now().Add(o.duration)
	done := func() bool {
		if o.count > 0 {
			return len(recs) >= o.count
		}
		return time.Now().After(end)
	}
	const step = 10 * time.Millisecond
	budget := 0.0
	next := time.Now()
	// Two chunks in flight keep the broker busy while the next is built.
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	sem := make(chan struct{}, 2)
	for !done() {
		if ctx.Err() != nil {
			break
		}
		n := 2000
		if o.rate > 0 {
			time.Sleep(time.Until(next))
			next = next.Add(step)
			budget += float64(o.rate) * step.Seconds()
			n = int(budget)
			budget -= float64(n)
		}
		if o.count > 0 {
			n = min(n, o.count-len(recs))
		}
		if n == 0 {
			continue
		}
		msgs := make([]kafka.Message, n)
		now := time.Now()
		for i := range msgs {
			seq := len(recs)
			msg, rec := g.next(seq, now)
			recs = append(recs, rec)
			msg.Headers = append(msg.Headers, kafka.Header{Key: "loadtest-run", Value: []byte(g.run)}, kafka.Header{Key: "loadtest-seq", Value: []byte(fmt.Sprint(seq))})
			msgs[i] = msg
		}
		select {
		case err := <-errs:
			wg.Wait()
			return recs, err
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				errs <- fmt.Errorf("produce: %w", err)
				return
			}
			produced.Add(int64(len(msgs)))
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return recs, err
	default:
	}
	return recs, nil
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
