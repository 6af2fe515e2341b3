package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/testenv"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/tenants"
)

// full reports whether the long form runs.
func full() bool { return os.Getenv("CELLTTL_FAULTS") == "full" }

// size picks the short or the full figure.
func size(short, long int) int {
	if full() {
		return long
	}
	return short
}

const tenantsYAML = `strategy: default-expiration
default_ttl: 2d
record_real_timestamp: true
tenants:
  acme: 1h
  globex: 3d
`

var tenantIDs = []string{"acme", "globex", "initech", "umbrella"}

const (
	maxEventBytes = 4096
	drainTimeout  = 20 * time.Second
)

// kind is what must become of an event.
type kind uint8

const (
	valid   kind = iota
	clamped      // occurred_at far in the future: written at the processing time
	invalid      // dead-lettered
	expired      // before 1970: skipped
)

type produced struct {
	tenant string
	user   string
	millis int64
	kind   kind
	sentAt time.Time
}

// suite is one scenario's services, workers and bookkeeping.
type suite struct {
	t       *testing.T
	brokers []string
	topic   string
	group   string
	table   string
	tenants string
	bin     string
	dc      *bigtable.Client
	ac      *bigtable.AdminClient

	mu      sync.Mutex
	workers map[int]*worker
	nextID  int
	events  []produced
	sent    atomic.Int64
	faults  int
	maxLag  int64
	log     bytes.Buffer
	env     []string // extra environment of new workers
}

type worker struct {
	id    int
	cmd   *exec.Cmd
	admin string
	done  chan error
	out   *syncBuffer
}

type syncBuffer = testenv.Buffer

// newSuite needs the real broker: the suite kills and restarts it.
func newSuite(t *testing.T, partitions int) *suite {
	if os.Getenv("CELLTTL_FAULTS") == "" {
		t.Skip("the fault suite kills the broker, so it runs on its own: CELLTTL_FAULTS=short|full (make test and make faults set it)")
	}
	if !testenv.Real() || os.Getenv("CELLTTL_SERVICES_DIR") == "" {
		t.Fatal("the fault suite needs the services of scripts/services.sh (make test or make faults start them)")
	}
	s := &suite{t: t, brokers: testenv.Kafka(t), topic: testenv.Name("faults"), table: testenv.Name("faults"), workers: map[int]*worker{}}
	s.group = s.topic
	s.dc, s.ac = testenv.Clients(t)
	testenv.CreateTopic(t, s.brokers, s.topic, partitions)
	testenv.CreateTopic(t, s.brokers, s.topic+".dlq", 1)
	s.tenants = filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(s.tenants, []byte(tenantsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s.logf("suite: topic and table ready")
	s.bin = testenv.WorkerBinary(t)
	s.logf("suite: worker built")
	if out, err := exec.Command(s.bin, "setup", "--table", s.table, "--tenants", s.tenants).CombinedOutput(); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		for _, w := range s.workers {
			if t.Failed() {
				if st, err := s.status(w); err == nil {
					t.Logf("worker %d status: kafka %v", w.id, st["kafka"])
				}
				t.Logf("worker %d output:\n%s", w.id, w.out.String())
			}
			_ = w.cmd.Process.Kill()
		}
		s.mu.Unlock()
		_ = s.ac.DeleteTable(context.Background(), s.table)
		if t.Failed() {
			t.Logf("suite log:\n%s", s.log.String())
		}
	})
	return s
}

func (s *suite) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs a worker process.
func (s *suite) start(extra ...string) *worker {
	s.t.Helper()
	port := freePort(s.t)
	s.mu.Lock()
	id := s.nextID
	s.nextID++
	s.mu.Unlock()
	args := append([]string{"run", "--brokers", strings.Join(s.brokers, ","), "--topic", s.topic, "--group", s.group,
		"--table", s.table, "--tenants", s.tenants, "--log-format", "text", "--log-level", "warn",
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", port), "--session-timeout", "6s", "--commit-interval", "200ms",
		"--drain-timeout", drainTimeout.String(), "--max-event-bytes", strconv.Itoa(maxEventBytes)}, extra...)
	w := &worker{id: id, admin: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan error, 1), out: &syncBuffer{}}
	w.cmd = exec.Command(s.bin, args...)
	w.cmd.Env = append(os.Environ(), s.env...)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	if err := w.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	s.mu.Lock()
	s.workers[id] = w
	s.mu.Unlock()
	s.logf("worker %d started (pid %d)", id, w.cmd.Process.Pid)
	return w
}

// kill SIGKILLs a worker.
func (s *suite) kill(w *worker) {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
	s.forget(w)
	s.logf("worker %d SIGKILLed", w.id)
}

// term SIGTERMs a worker and requires a clean exit within the drain
// timeout; it returns how long the drain took.
func (s *suite) term(w *worker) time.Duration {
	s.t.Helper()
	start := time.Now()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.done:
		took := time.Since(start)
		s.forget(w)
		if err != nil {
			s.t.Errorf("worker %d exited with %v after SIGTERM, want 0:\n%s", w.id, err, w.out.String())
		}
		s.logf("worker %d stopped by SIGTERM in %s", w.id, took.Round(time.Millisecond))
		return took
	case <-time.After(drainTimeout + 5*time.Second):
		s.t.Errorf("worker %d did not exit within the drain timeout", w.id)
		_ = w.cmd.Process.Kill()
		<-w.done
		s.forget(w)
		return drainTimeout
	}
}

func (s *suite) forget(w *worker) {
	s.mu.Lock()
	delete(s.workers, w.id)
	s.mu.Unlock()
}

func (s *suite) running() []*worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*worker, 0, len(s.workers))
	for _, w := range s.workers {
		out = append(out, w)
	}
	return out
}

// produce sends n events at about rate per second, a share of them poison,
// and returns when all are acknowledged by the broker. It retries through a
// broker outage.
func (s *suite) produce(ctx context.Context, n, rate int) {
	s.t.Helper()
	r := rand.New(rand.NewPCG(uint64(n), uint64(rate)))
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(s.brokers...), Topic: s.topic, Balancer: &kafka.Hash{}, BatchSize: 500,
		BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireAll, MaxAttempts: 20, Transport: tr}
	defer w.Close()
	const chunk = 500
	tick := time.Duration(float64(time.Second) * chunk / float64(rate))
	next := time.Now()
	for seq := 0; seq < n; seq += chunk {
		time.Sleep(time.Until(next))
		next = next.Add(tick)
		msgs := make([]kafka.Message, 0, chunk)
		s.mu.Lock()
		for i := seq; i < min(seq+chunk, n); i++ {
			v, ev := s.event(r, i)
			s.events = append(s.events, ev)
			msgs = append(msgs, kafka.Message{Key: []byte(ev.user), Value: v, Headers: []kafka.Header{{Key: "seq", Value: []byte(strconv.Itoa(i))}}})
		}
		s.mu.Unlock()
		for attempt := 0; ; attempt++ {
			err := w.WriteMessages(ctx, msgs...)
			if err == nil {
				break
			}
			if ctx.Err() != nil || attempt > 120 {
				s.t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(500 * time.Millisecond) // the broker may be down on purpose
		}
		s.sent.Add(int64(len(msgs)))
	}
}

// event makes event seq: mostly valid, with each kind of poison mixed in.
func (s *suite) event(r *rand.Rand, seq int) ([]byte, produced) {
	now := time.Now()
	ev := produced{tenant: tenantIDs[r.IntN(len(tenantIDs))], user: "u" + strconv.Itoa(r.IntN(500)), millis: now.UnixMilli(), sentAt: now}
	id := "f-" + strconv.Itoa(seq)
	at := now.UTC().Format(time.RFC3339Nano)
	switch seq % 50 {
	case 7:
		ev.kind = invalid
		return []byte(`{"event_id":"` + id + `","tenant_id":`), ev // truncated JSON
	case 17:
		ev.kind = invalid
		return []byte(`{"event_id":"` + id + `"}`), ev // missing tenant_id
	case 27:
		ev.kind = invalid
		return []byte(`{"event_id":"` + id + `#x","tenant_id":"` + ev.tenant + `"}`), ev // '#' in an id
	case 37:
		ev.kind = invalid
		return []byte(`{"event_id":"` + id + `","tenant_id":"` + ev.tenant + `","pad":"` + strings.Repeat("p", maxEventBytes) + `"}`), ev // oversize
	case 47:
		ev.kind = invalid
		return append([]byte{0xff, 0x00, 0xfe}, id...), ev // binary garbage
	case 13:
		ev.kind = clamped
		at = now.Add(100 * 365 * 24 * time.Hour).UTC().Format(time.RFC3339Nano)
	case 23:
		ev.kind = expired
		at = "1969-07-20T20:17:40Z"
	}
	return []byte(`{"event_id":"` + id + `","tenant_id":"` + ev.tenant + `","user_id":"` + ev.user + `","occurred_at":"` + at + `"}`), ev
}

// groupLag is the group's committed lag over all partitions, from the
// broker (workers may be dead).
func (s *suite) groupLag(partitions int) (int64, error) {
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(s.brokers...), Timeout: 5 * time.Second, Transport: tr}
	ids := make([]int, partitions)
	reqs := make([]kafka.OffsetRequest, partitions)
	for i := range ids {
		ids[i], reqs[i] = i, kafka.LastOffsetOf(i)
	}
	ctx := context.Background()
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: s.group, Topics: map[string][]int{s.topic: ids}})
	if err != nil {
		return 0, err
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.topic: reqs}})
	if err != nil {
		return 0, err
	}
	committed := map[int]int64{}
	for _, p := range of.Topics[s.topic] {
		committed[p.Partition] = max(p.CommittedOffset, 0)
	}
	var lag int64
	for _, p := range lo.Topics[s.topic] {
		if p.Error != nil {
			return 0, p.Error
		}
		lag += p.LastOffset - committed[p.Partition]
	}
	return lag, nil
}

// watchLag samples the group's lag every second until ctx ends.
func (s *suite) watchLag(ctx context.Context, partitions int) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if lag, err := s.groupLag(partitions); err == nil {
				s.mu.Lock()
				s.maxLag = max(s.maxLag, lag)
				s.mu.Unlock()
			}
		}
	}
}

// settle waits until every produced event is committed; it returns how long
// that took.
func (s *suite) settle(partitions int, timeout time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	defer func() {
		if time.Now().After(deadline) {
			// Stuck: have every worker print its goroutines (SIGQUIT).
			for _, w := range s.running() {
				_ = w.cmd.Process.Signal(syscall.SIGQUIT)
			}
			time.Sleep(time.Second)
		}
	}()
	testenv.Eventually(s.t, timeout, func() (bool, string) {
		lag, err := s.groupLag(partitions)
		if err == nil && lag == 0 {
			return true, ""
		}
		committed, end := testenv.Offsets(s.t, s.brokers, s.group, s.topic, partitions)
		return false, fmt.Sprintf("group lag %d (%v): committed %v, end %v", lag, err, committed, end)
	})
	return time.Since(start)
}

func (s *suite) status(w *worker) (map[string]any, error) {
	resp, err := http.Get(w.admin + "/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st map[string]any
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

var _ = rowkey.Key
var _ = tenants.Load

// writtenIDs returns the event ids in the table.
func (s *suite) writtenIDs() map[string]bool {
	out := map[string]bool{}
	err := s.dc.Open(s.table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		k := r.Key()
		out[k[strings.LastIndexByte(k, '#')+1:]] = true
		return true
	}, bigtable.RowFilter(bigtable.StripValueFilter()))
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}
