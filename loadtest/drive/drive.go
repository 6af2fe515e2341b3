// Package drive puts load on the worker: it produces synthetic events to
// the worker's topic at a target rate (or as fast as it can) for a count
// or a duration, samples the progress each second from the worker's
// /status, and follows the worker until it has caught up.
package drive

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/testkit/lab"
)

// Options is the load: where it goes, how much and how fast, and what the
// events are like.
type Options struct {
	Brokers      []string
	Topic        string
	Mix          synth.Mix
	Shape        synth.Shape
	Rate         int           // events per second (0: as fast as possible)
	Count        int           // events to produce (0: until Duration)
	Duration     time.Duration // how long to produce when Count is 0
	Users        uint64
	ZipfS        float64
	PayloadBytes int
	Malformed    float64 // share of malformed events
	Seed         uint64  // 0: from the clock
	StatusURL    string  // the worker's /status
	Settle       time.Duration
	// Stop, when closed, ends Produce before Count or Duration: a caller
	// that decides the end as it goes (loadtest rollout) closes it.
	Stop <-chan struct{}
}

// Sample is one second of the run.
type Sample struct {
	At                           time.Duration
	Produced, Written, Dead, Lag int64
	ProducedRate, WrittenRate    float64
	workerReachable              bool
}

// Result is a run's samples and what it produced.
type Result struct {
	RunID    string
	Samples  []Sample
	Produced int64
	Invalid  int
	Elapsed  time.Duration
	// what a caller needs to verify later
	Gen  *synth.Generator
	Recs []synth.Sent
}

// Run produces and follows the worker until it caught up, or until
// o.Settle after the last event produced, printing a progress line each
// second to stdout.
func Run(ctx context.Context, o *Options, stdout io.Writer) (*Result, error) {
	seed := o.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	runID := fmt.Sprintf("lt%x", time.Now().UnixNano()/1e6%0xffffffff)
	gen := synth.New(synth.Config{Run: runID, Mix: o.Mix, Shape: o.Shape, Users: max(o.Users, 2), ZipfS: max(o.ZipfS, 1.0001),
		PayloadBytes: o.PayloadBytes, Malformed: o.Malformed, Seed: seed})
	if len(o.Shape.WorkerFlags) > 0 {
		fmt.Fprintf(stdout, "events in the %s shape: the worker reads them with %s\n", o.Shape.Name, strings.Join(o.Shape.WorkerFlags, " "))
	}

	// The worker's counters are cumulative: measure from here.
	base, err := waitStatus(ctx, o.StatusURL)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "run %s: producing to %s (%s), tenants %v, rate %s, %s\n", runID, o.Topic, strings.Join(o.Brokers, ","), o.Mix.Tenants(), RateText(o.Rate), amountText(o))

	var produced atomic.Int64
	var recs []synth.Sent
	var prodErr error
	prodDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(prodDone)
		recs, prodErr = Produce(ctx, o, gen, &produced)
	}()

	var samples []Sample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last Sample
	producing := true
	var settleDeadline time.Time
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-prodDone:
			if producing {
				producing = false
				settleDeadline = time.Now().Add(o.Settle)
				if prodErr != nil {
					return nil, prodErr
				}
			}
			prodDone = nil
			continue
		case <-tick.C:
		}
		s := Sample{At: time.Since(start), Produced: produced.Load()}
		t, err := lab.FetchStatus(ctx, o.StatusURL)
		if err == nil {
			s.workerReachable = true
			s.Written, s.Dead, s.Lag = t.Written-base.Written, t.Dead-base.Dead, t.Lag
			if !producing && t.Written-base.Written+t.Dead-base.Dead+t.Expired-base.Expired >= s.Produced {
				samples = append(samples, rates(s, last))
				printSample(stdout, samples[len(samples)-1])
				break
			}
		} else {
			s.Written, s.Dead, s.Lag = last.Written, last.Dead, last.Lag
		}
		s = rates(s, last)
		samples = append(samples, s)
		last = s
		printSample(stdout, s)
		if !producing && time.Now().After(settleDeadline) {
			fmt.Fprintf(stdout, "the worker did not catch up within %s\n", o.Settle)
			break
		}
	}
	return newResult(runID, samples, time.Since(start), gen, recs), nil
}

// newResult is the result of a run that produced recs with gen.
func newResult(runID string, samples []Sample, elapsed time.Duration, gen *synth.Generator, recs []synth.Sent) *Result {
	res := &Result{RunID: runID, Samples: samples, Produced: int64(len(recs)), Elapsed: elapsed, Gen: gen, Recs: recs}
	for _, r := range recs {
		if !r.Valid {
			res.Invalid++
		}
	}
	return res
}

// waitStatus reads the worker's status, waiting up to a minute for it to
// answer.
func waitStatus(ctx context.Context, url string) (lab.Status, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := lab.FetchStatus(ctx, url)
		if err == nil {
			return st, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return lab.Status{}, fmt.Errorf("the worker's status at %s does not answer: %w", url, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func rates(s, last Sample) Sample {
	dt := (s.At - last.At).Seconds()
	if dt > 0 {
		s.ProducedRate = float64(s.Produced-last.Produced) / dt
		s.WrittenRate = float64(s.Written-last.Written) / dt
	}
	return s
}

func printSample(w io.Writer, s Sample) {
	fmt.Fprintf(w, "t=%4ds produced %9d (%7.0f/s)  written %9d (%7.0f/s)  dead-lettered %6d  lag %8d\n",
		int(s.At.Seconds()+0.5), s.Produced, s.ProducedRate, s.Written, s.WrittenRate, s.Dead, s.Lag)
}

// RateText says a target rate as the run's output and report do.
func RateText(r int) string {
	if r == 0 {
		return "as fast as possible"
	}
	return fmt.Sprintf("%d/s", r)
}

func amountText(o *Options) string {
	if o.Count > 0 {
		return fmt.Sprintf("%d events", o.Count)
	}
	return "for " + o.Duration.String()
}

// Produce writes events of g to o.Topic, at o.Rate, until o.Count or
// o.Duration is reached, and returns what it produced; produced counts the
// events the broker acknowledged.
func Produce(ctx context.Context, o *Options, g *synth.Generator, produced *atomic.Int64) ([]synth.Sent, error) {
	w := &kafka.Writer{
		Addr:         kafka.TCP(o.Brokers...),
		Topic:        o.Topic,
		Balancer:     &kafka.Hash{},
		BatchSize:    1000,
		BatchTimeout: 2 * time.Millisecond,
		RequiredAcks: kafka.RequireAll,
		Transport:    &kafka.Transport{},
	}
	defer w.Close()
	var recs []synth.Sent
	if o.Count > 0 {
		recs = make([]synth.Sent, 0, o.Count)
	}
	end := time.Now().Add(o.Duration)
	done := func() bool {
		select {
		case <-o.Stop: // a nil Stop never ends it
			return true
		default:
		}
		if o.Count > 0 {
			return len(recs) >= o.Count
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
		if o.Rate > 0 {
			time.Sleep(time.Until(next))
			next = next.Add(step)
			budget += float64(o.Rate) * step.Seconds()
			n = int(budget)
			budget -= float64(n)
		}
		if o.Count > 0 {
			n = min(n, o.Count-len(recs))
		}
		if n == 0 {
			continue
		}
		var msgs []kafka.Message
		msgs, recs = chunk(g, recs, n)
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

// chunk makes the next n events of g, numbered on from len(recs), each
// with its run and number in headers, and returns them with recs grown by
// their records.
func chunk(g *synth.Generator, recs []synth.Sent, n int) ([]kafka.Message, []synth.Sent) {
	msgs := make([]kafka.Message, n)
	now := time.Now()
	for i := range msgs {
		seq := len(recs)
		msg, rec := g.Next(seq, now)
		recs = append(recs, rec)
		msg.Headers = append(msg.Headers, kafka.Header{Key: "loadtest-run", Value: []byte(g.Run())}, kafka.Header{Key: "loadtest-seq", Value: []byte(fmt.Sprint(seq))})
		msgs[i] = msg
	}
	return msgs, recs
}
