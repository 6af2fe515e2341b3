// Package bench is what `loadtest bench` measures, in one run against the
// real broker and emulator: the two ceilings of the worker's throughput
// (raw ApplyBulk, raw kafka-go consumption), the worker process itself
// (events per second, CPU per event, peak RSS, who used the cores), and the
// decomposition of its latency against raw ApplyBulk's.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/loadtest/drive"
	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
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
	if err := createTopic(o.Brokers, topic, o.Partitions); err != nil {
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

	bin, err := buildWorker(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(bin))
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
func events(o Options, cfg *tenants.Config) (m synth.Mix, run string, msgs []kafka.Message, recs []synth.Record, err error) {
	var listed []string
	for t := range cfg.Policy.Tenants {
		listed = append(listed, t)
	}
	if m, err = synth.ParseMix(listed, ""); err != nil {
		return synth.Mix{}, "", nil, nil, err
	}
	run = fmt.Sprintf("b%x", time.Now().UnixNano()/1e6%0xffffff)
	shape := o.Shape
	if shape.Name == "" {
		shape = synth.Contract()
	}
	gen := synth.New(synth.Config{Run: run, Mix: m, Shape: shape, Users: 10000, ZipfS: 1.1, PayloadBytes: o.PayloadBytes, Seed: 1})
	now := time.Now()
	msgs = make([]kafka.Message, o.Events)
	recs = make([]synth.Record, o.Events)
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

// measured is one measurement: its rate, and the CPU time per event of
// the process measured.
type measured struct {
	rate        float64 // events per second
	cpuPerEvent float64 // µs
	rss         int64   // peak resident set, bytes (the worker only)
	cores       string  // who used the two cores meanwhile
}

// benchApplyBulk writes the rows the events become straight to a new table
// with the client's ApplyBulk, as the worker's writers do (the mutations
// built in the timed part): the client side's floor of CPU per row.
func benchApplyBulk(ctx context.Context, p *expiry.Policy, m synth.Mix, values [][]byte, recs []synth.Record, writers int) (measured, error) {
	tbl, family, cleanup, err := benchTable(ctx, p)
	if err != nil {
		return measured{}, err
	}
	defer cleanup()
	rows := make([]sink.Row, len(values))
	for i, r := range recs {
		rows[i] = benchRow(p, m, i, r, values[i])
	}
	batches := make(chan []sink.Row)
	errs := make(chan error, writers)
	watch := watchCPU(0)
	cpu0, start := SelfCPU(), time.Now()
	for range writers {
		go func() {
			for b := range batches {
				if err := applyBulk(ctx, tbl, family, b); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < len(rows); i += 1000 {
		batches <- rows[i:min(i+1000, len(rows))]
	}
	close(batches)
	for range writers {
		if err := <-errs; err != nil {
			return measured{}, err
		}
	}
	return measured{rate: float64(len(rows)) / time.Since(start).Seconds(), cpuPerEvent: perEvent(SelfCPU()-cpu0, len(rows)), cores: watch.shares()}, nil
}

// benchRow is the row the worker makes of generated event seq: the raw
// writes write what the worker would.
func benchRow(p *expiry.Policy, m synth.Mix, seq int, r synth.Record, value []byte) sink.Row {
	tenant := m.TenantName(int(r.Tenant))
	return sink.Row{Key: rowkey.Key(tenant, synth.UserName(r.User), strconv.Itoa(seq), r.Millis),
		Timestamp: p.Cell(tenant, time.UnixMilli(r.Millis)).Timestamp, Value: value, WrittenAt: p.RecordRealTimestamp}
}

// benchTable makes a table for raw writes, and returns it with its family
// and what deletes it (the emulator never frees memory otherwise).
func benchTable(ctx context.Context, p *expiry.Policy) (*bigtable.Table, string, func(), error) {
	dc, err := bigtable.NewClient(ctx, "local", "local")
	if err != nil {
		return nil, "", nil, err
	}
	ac, err := bigtable.NewAdminClient(ctx, "local", "local")
	if err != nil {
		dc.Close()
		return nil, "", nil, err
	}
	t := sink.Target{Table: fmt.Sprintf("bench-%d", time.Now().UnixNano()), Family: "c"}
	cleanup := func() {
		_ = ac.DeleteTable(context.WithoutCancel(ctx), t.Table)
		ac.Close()
		dc.Close()
	}
	if _, err := sink.Setup(ctx, ac, dc, t, p.GCMaxAge(), sink.SetupOptions{}); err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return dc.Open(t.Table), t.Family, cleanup, nil
}

// applyBulk writes rows in one ApplyBulk call, the cells as the worker
// writes them.
func applyBulk(ctx context.Context, tbl *bigtable.Table, family string, rows []sink.Row) error {
	keys := make([]string, len(rows))
	muts := make([]*bigtable.Mutation, len(rows))
	var now [8]byte
	binary.BigEndian.PutUint64(now[:], uint64(time.Now().UnixMicro()))
	for i := range rows {
		r := &rows[i]
		mut := bigtable.NewMutation()
		mut.Set(family, rowkey.ColumnEvent, bigtable.Timestamp(r.Timestamp), r.Value)
		if r.WrittenAt {
			mut.Set(family, rowkey.ColumnWrittenAt, bigtable.Timestamp(r.Timestamp), now[:])
		}
		keys[i], muts[i] = r.Key, mut
	}
	rowErrs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return fmt.Errorf("ApplyBulk: %w", err)
	}
	for _, e := range rowErrs {
		if e != nil {
			return fmt.Errorf("ApplyBulk: a row: %w", e)
		}
	}
	return nil
}

func createTopic(brokers []string, topic string, partitions int) error {
	conn, err := kafka.Dial("tcp", brokers[0])
	if err != nil {
		return err
	}
	defer conn.Close()
	ctrl, err := conn.Controller()
	if err != nil {
		return err
	}
	cc, err := kafka.Dial("tcp", net.JoinHostPort(ctrl.Host, strconv.Itoa(ctrl.Port)))
	if err != nil {
		return err
	}
	defer cc.Close()
	if err := cc.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	time.Sleep(time.Second) // metadata reaches the broker's other handlers
	return nil
}

func produceAll(ctx context.Context, brokers []string, topic string, msgs []kafka.Message) error {
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, BatchSize: 5000,
		BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: &kafka.Transport{}}
	defer w.Close()
	for i := 0; i < len(msgs); i += 20000 {
		// Copies: the writer sets each message's topic and partition.
		batch := slices.Clone(msgs[i:min(i+20000, len(msgs))])
		if err := w.WriteMessages(ctx, batch...); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// benchConsume reads n messages with a kafka-go consumer-group reader, timed
// from the first message to the last; its CPU time is counted from the
// reader's start (joining the group costs little of it).
func benchConsume(ctx context.Context, brokers []string, topic string, n int) (measured, error) {
	cpu0, watch := SelfCPU(), watchCPU(0)
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, GroupID: topic + "-raw", MinBytes: 1, MaxBytes: 10 << 20,
		MaxWait: 250 * time.Millisecond, StartOffset: kafka.FirstOffset, QueueCapacity: 1000})
	defer r.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var start time.Time
	for i := range n {
		if _, err := r.FetchMessage(cctx); err != nil {
			return measured{}, fmt.Errorf("consume message %d of %d: %w", i, n, err)
		}
		if i == 0 {
			start = time.Now()
		}
	}
	return measured{rate: float64(n-1) / time.Since(start).Seconds(), cpuPerEvent: perEvent(SelfCPU()-cpu0, n), cores: watch.shares()}, nil
}

func buildWorker(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "cellttl-bench")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "worker")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/worker").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the worker (run from the repository root): %v\n%s", err, out)
	}
	return bin, nil
}

// workerProc is a worker process the bench started.
type workerProc struct {
	cmd   *exec.Cmd
	admin string // http://host:port of its admin server
	pprof string // http://host:port of its profiles
	table string
}

// startWorker sets up a table of the topic's name and starts a worker on
// the topic.
func startWorker(ctx context.Context, bin string, brokers []string, tenantsFile, topic, flags string) (*workerProc, error) {
	table := topic
	common := []string{"--tenants", tenantsFile, "--table", table, "--log-level", "warn"}
	if out, err := exec.CommandContext(ctx, bin, append([]string{"setup"}, common...)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("worker setup: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{"run", "--brokers", strings.Join(brokers, ","), "--topic", topic, "--group", topic, "--admin-addr", admin}, common...)
	// Profiles: on a listener of their own where the build has
	// --pprof-addr; a --baseline-bin from before serves them on the
	// admin port.
	pprof := admin
	if help, _ := exec.CommandContext(ctx, bin, "run", "--help").CombinedOutput(); strings.Contains(string(help), "-pprof-addr") {
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		pprof = fmt.Sprintf("127.0.0.1:%d", pp)
		args = append(args, "--pprof-addr", pprof)
	}
	args = append(args, strings.Fields(flags)...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &workerProc{cmd: cmd, admin: "http://" + admin, pprof: "http://" + pprof, table: table}, nil
}

// stop stops the worker and deletes its table: the emulator never frees
// memory otherwise.
func (w *workerProc) stop(ctx context.Context) {
	if w.cmd != nil { // nil: waited for already
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		_ = w.cmd.Wait()
	}
	ac, err := bigtable.NewAdminClient(context.WithoutCancel(ctx), "local", "local")
	if err == nil {
		_ = ac.DeleteTable(context.WithoutCancel(ctx), w.table)
		_ = ac.DeleteTable(context.WithoutCancel(ctx), w.table+"-erasures") // worker setup made it
		ac.Close()
	}
}

// benchWorker pre-produces the events, starts a worker on them, and times
// from its first write to its last. Its CPU time per event is counted from
// the moment it owns partitions (its start-up is not per event) to its
// last write. With profileDir set, it saves the worker's CPU profile of
// the run and its allocations.
func benchWorker(ctx context.Context, bin string, brokers []string, tenantsFile, name string, partitions int, msgs []kafka.Message, flags, profileDir string, profileSeconds int) (measured, error) {
	topic := name
	if err := createTopic(brokers, topic, partitions); err != nil {
		return measured{}, err
	}
	if err := produceAll(ctx, brokers, topic, msgs); err != nil {
		return measured{}, err
	}
	w, err := startWorker(ctx, bin, brokers, tenantsFile, topic, flags)
	if err != nil {
		return measured{}, err
	}
	defer w.stop(ctx)
	pid := w.cmd.Process.Pid
	var first, last time.Time
	var cpu0, cpu1 time.Duration
	var peak int64
	var profiled chan error
	var watch *cpuWatch
	deadline := time.Now().Add(15 * time.Minute)
	for time.Now().Before(deadline) {
		// Each look at /status costs the worker CPU, which counts in its
		// CPU per event: the brief page (a few hundred µs, where the full
		// one takes 15 ms with 10,000 tenants), often enough to time the
		// run, seldom enough to cost it about 1%.
		time.Sleep(25 * time.Millisecond)
		peak = max(peak, rss(pid))
		t, err := drive.FetchStatus(ctx, w.admin+"/status?tenants=false")
		if err != nil {
			continue
		}
		if t.Reading && cpu0 == 0 {
			if cpu0, err = ProcCPU(pid); err != nil {
				return measured{}, err
			}
			watch = watchCPU(pid)
			if profileDir != "" {
				profiled = make(chan error, 1)
				go func() {
					profiled <- saveProfile(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", w.pprof, profileSeconds), filepath.Join(profileDir, "worker-cpu.pprof"))
				}()
			}
		}
		done := t.Written + t.Dead + t.Expired
		if done > 0 && first.IsZero() {
			first = time.Now()
		}
		if done >= int64(len(msgs)) {
			last = time.Now()
			if cpu1, err = ProcCPU(pid); err != nil {
				return measured{}, err
			}
			if watch == nil { // done before it was seen reading
				watch = watchCPU(pid)
			}
			break
		}
	}
	if last.IsZero() {
		return measured{}, fmt.Errorf("the worker did not write all %d events", len(msgs))
	}
	if profiled != nil {
		if err := errors.Join(<-profiled, saveProfile(ctx, w.pprof+"/debug/pprof/allocs", filepath.Join(profileDir, "worker-allocs.pprof"))); err != nil {
			return measured{}, err
		}
	}
	return measured{rate: float64(len(msgs)) / last.Sub(first).Seconds(), cpuPerEvent: perEvent(cpu1-cpu0, len(msgs)), rss: peak, cores: watch.shares()}, nil
}

// saveProfile fetches a profile from the worker's admin server into file.
func saveProfile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("profile %s: %w", url, err)
	}
	return os.WriteFile(file, data, 0o644)
}

// rss returns the process's peak resident set size in bytes (Linux).
func rss(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
