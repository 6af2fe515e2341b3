// Package rollout is what `loadtest rollout` measures: a rolling restart of
// a group of worker processes under steady load, against the real broker
// and emulator, done as a Kubernetes Deployment's rolling update does it
// (a new pod, its readiness and minReadySeconds, then SIGTERM to an old
// one, which drains), and seen from the group's committed offsets: how
// long partitions waited with lag and no commit, how many events were
// written more than once, how many rebalances it took.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/loadtest/drive"
	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/lab"
)

// Options is what the rollout flags say.
type Options struct {
	Brokers      []string
	WorkerBin    string // the worker build under test
	Partitions   int
	Workers      int // replicas
	Rate         int // events per second, steadily
	PayloadBytes int
	TenantsFile  string
	Warmup       time.Duration // load before the rollout starts
	Cooldown     time.Duration // load after the last old worker exited
	Surge        int           // new workers started at a time (maxSurge; maxUnavailable is 0)
	MinReady     time.Duration // minReadySeconds
	Probe        time.Duration // how often /readyz is asked
	Grace        time.Duration // terminationGracePeriodSeconds: SIGKILL after
	Poll         time.Duration // how often the group's commits are read
	// SessionTimeout and CommitInterval are given to every worker; the
	// goal is computed from them (the heartbeat is a tenth of the session
	// timeout in both builds: ingest.NewConsumer).
	SessionTimeout time.Duration
	CommitInterval time.Duration
	WorkerFlags    string // more flags for every worker, space-separated
	Dir            string // where the workers' logs go ("": a new temporary directory)
	Keep           bool   // keep the topic and the table
	Command        string // the command line, printed with the summary
}

// readyTimeout bounds the wait for a worker's readiness.
const readyTimeout = 2 * time.Minute

// Run runs the rollout once and prints its summary to stdout.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if o.Workers < 1 || o.Partitions < o.Workers || o.Surge < 1 || o.Rate < 1 || o.Poll <= 0 {
		return fmt.Errorf("rollout: --workers %d, --partitions %d, --surge %d, --rate %d, --poll %s: want workers >= 1, partitions >= workers, surge >= 1, rate >= 1, poll > 0",
			o.Workers, o.Partitions, o.Surge, o.Rate, o.Poll)
	}
	cfg, err := tenants.Load(o.TenantsFile)
	if err != nil {
		return err
	}
	r := &run{o: o, name: fmt.Sprintf("ro%x", time.Now().UnixNano()/1e6%0xffffffff), stdout: stdout}
	r.client = &kafka.Client{Addr: kafka.TCP(o.Brokers...), Timeout: 10 * time.Second}
	if r.dir = o.Dir; r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "cellttl-rollout-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rollout %s: worker %s; %d workers, %d partitions, %d events/s; logs in %s\n", r.name, o.WorkerBin, o.Workers, o.Partitions, o.Rate, r.dir)
	defer r.cleanup(ctx)
	if err := r.prepare(ctx); err != nil {
		return err
	}
	res, err := r.measure(ctx, cfg)
	if err != nil {
		return err
	}
	res.print(stdout, o)
	return nil
}

// run is one rollout under way.
type run struct {
	o      Options
	name   string // topic, group and table
	dir    string
	stdout io.Writer
	client *kafka.Client
	procs  []*proc // every worker started, in order
	seq    int
}

// prepare creates the topic and the table, and starts the first
// generation of workers: one, which creates the dead-letter topic, then
// the others.
func (r *run) prepare(ctx context.Context) error {
	res, err := r.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: r.name, NumPartitions: r.o.Partitions, ReplicationFactor: 1}}})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", r.name, err)
	}
	if err := res.Errors[r.name]; err != nil {
		return fmt.Errorf("create topic %s: %w", r.name, err)
	}
	if err := lab.Run(ctx, r.o.WorkerBin, nil, "setup", "--tenants", r.o.TenantsFile, "--table", r.name, "--log-level", "warn"); err != nil {
		return err
	}
	first, err := r.start()
	if err != nil {
		return err
	}
	if err := first.waitReady(ctx, r.o.Probe, readyTimeout); err != nil {
		return err
	}
	var rest []*proc
	for range r.o.Workers - 1 {
		p, err := r.start()
		if err != nil {
			return err
		}
		rest = append(rest, p)
	}
	for _, p := range rest {
		if err := p.waitReady(ctx, r.o.Probe, readyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// start starts the next worker.
func (r *run) start() (*proc, error) {
	r.seq++
	args := []string{"--brokers", strings.Join(r.o.Brokers, ","), "--topic", r.name, "--group", r.name, "--table", r.name,
		"--tenants", r.o.TenantsFile, "--session-timeout", r.o.SessionTimeout.String(), "--commit-interval", r.o.CommitInterval.String()}
	args = append(args, strings.Fields(r.o.WorkerFlags)...)
	p, err := startWorker(r.o.WorkerBin, r.dir, "w"+strconv.Itoa(r.seq), args)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	return p, nil
}

// measure produces steadily, watches the group's commits, rolls the
// workers over after the warm-up, then stops the load, waits until the
// group committed everything and stops the workers.
func (r *run) measure(ctx context.Context, cfg *tenants.Config) (*result, error) {
	o := r.o
	mix, err := synth.ParseMix(slices.Collect(maps.Keys(cfg.Policy.Tenants)), "")
	if err != nil {
		return nil, err
	}
	gen := synth.New(synth.Config{Run: r.name, Mix: mix, PayloadBytes: o.PayloadBytes, Seed: 1})
	stop := make(chan struct{})
	load := &drive.Options{Brokers: o.Brokers, Topic: r.name, Mix: mix, Shape: synth.Contract(), Rate: o.Rate, Duration: 24 * time.Hour, Stop: stop}
	var produced atomic.Int64
	var prodErr error
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		_, prodErr = drive.Produce(ctx, load, gen, &produced)
	}()
	// sleep waits for d, or until ctx ends or the producer stopped.
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-prodDone:
			return fmt.Errorf("the producer stopped: %v", prodErr)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stopLoad := func() error {
		if stop != nil {
			close(stop)
			stop = nil
		}
		<-prodDone
		return prodErr
	}
	defer func() { _ = stopLoad() }()

	w := &watcher{client: r.client, topic: r.name, group: r.name, parts: o.Partitions}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); w.run(wctx, o.Poll) }()
	defer func() { stopWatch(); <-watched }()
	loads := &loadWatch{}
	lctx, stopLoads := context.WithCancel(ctx)
	go loads.run(lctx, 5*time.Second)
	defer stopLoads()

	res := &result{name: r.name, loadStart: time.Now()}
	cpuStart := markCPU(r.procs)
	if err := r.window(ctx, res, sleep); err != nil {
		return nil, err
	}
	res.cpu = cpuBetween(cpuStart, markCPU(r.procs), r.procs)
	if err := stopLoad(); err != nil {
		return nil, err
	}
	stopLoads()
	res.load = loads.summary()
	if res.produced, err = r.caughtUp(ctx, w); err != nil {
		return nil, err
	}
	stopWatch()
	<-watched
	res.samples, res.failedPolls = w.snapshot()
	if err := r.stopAll(); err != nil {
		return nil, err
	}
	return res, r.collect(res)
}

// window is the measured window under load: the warm-up, the rollout and
// the cool-down, each end noted in res.
func (r *run) window(ctx context.Context, res *result, sleep func(time.Duration) error) error {
	o := r.o
	fmt.Fprintf(r.stdout, "producing %d events/s; warm-up %s\n", o.Rate, o.Warmup)
	if err := sleep(o.Warmup); err != nil {
		return err
	}
	res.rolloutStart = time.Now()
	fmt.Fprintf(r.stdout, "rolling %d workers, %d at a time, min-ready %s\n", o.Workers, o.Surge, o.MinReady)
	steps, err := r.roll(ctx, sleep)
	if err != nil {
		return err
	}
	res.steps, res.rolloutEnd = steps, time.Now()
	fmt.Fprintf(r.stdout, "rollout done in %s; cool-down %s\n", res.rolloutEnd.Sub(res.rolloutStart).Round(100*time.Millisecond), o.Cooldown)
	if err := sleep(o.Cooldown); err != nil {
		return err
	}
	res.windowEnd = time.Now()
	return nil
}

// step is one batch of the rollout: the new workers, the old ones they
// replace, and when each became ready.
type step struct {
	started  time.Time
	ready    time.Time
	replaced []*proc
	added    []*proc
}

// roll replaces every worker of the first generation, o.Surge at a time:
// start the new ones, wait for their readiness and MinReady, SIGTERM as
// many old ones and go on at once (a terminating pod no longer counts
// against maxSurge); then wait for the old ones to exit.
func (r *run) roll(ctx context.Context, sleep func(time.Duration) error) ([]step, error) {
	old := append([]*proc(nil), r.procs...)
	var steps []step
	for len(old) > 0 {
		n := min(r.o.Surge, len(old))
		s := step{started: time.Now(), replaced: old[:n]}
		old = old[n:]
		for range n {
			p, err := r.start()
			if err != nil {
				return nil, err
			}
			s.added = append(s.added, p)
		}
		for _, p := range s.added {
			if err := p.waitReady(ctx, r.o.Probe, readyTimeout); err != nil {
				return nil, err
			}
		}
		s.ready = time.Now()
		if err := sleep(r.o.MinReady); err != nil {
			return nil, err
		}
		for _, p := range s.replaced {
			p.terminate(r.o.Grace)
		}
		steps = append(steps, s)
	}
	for _, s := range steps {
		for _, p := range s.replaced {
			select {
			case <-p.Done():
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return steps, nil
}

// caughtUp waits until the group has committed every partition to its
// end, and returns how many events the topic holds.
func (r *run) caughtUp(ctx context.Context, w *watcher) (int64, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		s, err := w.poll(ctx)
		if err == nil {
			var total, behind int64
			for p := range s.end {
				total += s.end[p]
				behind += s.end[p] - max(s.committed[p], 0)
			}
			if behind == 0 {
				return total, nil
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("the group has %d events uncommitted 3 minutes after the load stopped", behind)
			}
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// stopAll stops the workers still running and waits for them.
func (r *run) stopAll() error {
	for _, p := range r.procs {
		if p.termAt.IsZero() {
			p.terminate(r.o.Grace)
		}
	}
	var errs []error
	for _, p := range r.procs {
		<-p.Done()
		if p.Err() != nil {
			errs = append(errs, fmt.Errorf("worker %s: %w (log %s)", p.name, p.Err(), p.logPath))
		}
	}
	return errors.Join(errs...)
}

// collect reads every worker's log into res.
func (r *run) collect(res *result) error {
	res.logs = map[string]workerLog{}
	res.procs = r.procs
	for _, p := range r.procs {
		l, err := readLog(p.logPath)
		if err != nil {
			return err
		}
		res.logs[p.name] = l
	}
	return nil
}

// cleanup stops any worker left, and deletes the topics and tables unless
// o.Keep: the emulator holds every row in memory.
func (r *run) cleanup(ctx context.Context) {
	for _, p := range r.procs {
		p.Kill()
	}
	if r.o.Keep {
		fmt.Fprintf(r.stdout, "kept topic, group and table %s\n", r.name)
		return
	}
	ctx = context.WithoutCancel(ctx)
	_, _ = r.client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{r.name, r.name + ".dlq"}})
	if ac, err := bigtable.NewAdminClient(ctx, "local", "local"); err == nil {
		_ = ac.DeleteTable(ctx, r.name)
		_ = ac.DeleteTable(ctx, r.name+"-erasures")
		ac.Close()
	}
}
