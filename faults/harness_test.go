package faults

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/lab"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// full reports whether the long form runs.
func full() bool { return os.Getenv("TESTENV_FAULTS") == "full" }

// size picks the short or the full figure.
func size(short, long int) int {
	if full() {
		return long
	}
	return short
}

// tenantsYAML is the tests' tenants file; tenantIDs adds two it leaves
// to the default.
const tenantsYAML = testenv.TenantsYAML

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
	// fromRecord: the event has no occurred_at; its time is the record's.
	fromRecord bool
	// size and sha256 of the value, for a dead letter that may be cut
	size   int
	sha256 string
}

func (k kind) String() string {
	return [...]string{"valid", "clamped", "invalid", "expired"}[k]
}

// suite is one scenario's services, workers and bookkeeping.
type suite struct {
	t       *testing.T
	brokers []string
	topic   string
	dlq     string
	group   string
	table   string
	tenants string
	bin     string
	dc      *bigtable.Client
	ac      *bigtable.AdminClient
	// configs are the tenants files the run went through, the first one
	// first: a timestamp must follow one of them.
	configs []*tenants.Config
	// event makes event seq; s.poisoned unless a scenario says otherwise.
	event func(r *rand.Rand, seq int) ([]byte, produced)
	// workerArgs are extra flags of every worker (SASL credentials...).
	workerArgs []string
	// workerBrokers, when set, are what workers connect to.
	workerBrokers []string
	// maxEvent is the workers' --max-event-bytes.
	maxEvent int
	// unreadTopic: the oracle does not read the input topic back (it holds
	// batches no plain client should decompress). Events then must carry
	// their own time, and the group's lag stands for the commits.
	unreadTopic bool

	mu      sync.Mutex
	workers map[int]*worker
	ended   []*worker // stopped or killed: their logs, for a failure
	nextID  int
	events  []produced
	sent    atomic.Int64
	faults  int
	maxLag  int64
	log     bytes.Buffer
	env     []string // extra environment of new workers
}

type worker struct {
	*lab.Process
	id  int
	out *syncBuffer
}

type syncBuffer = testenv.Buffer

// topicOptions shape the suite's topics.
type topicOptions struct {
	config      map[string]string // of the input topic
	dlqConfig   map[string]string // of the dead-letter topic
	replication int
}

type option func(*topicOptions)

// withTopicConfig sets configs of the input topic (max.message.bytes...).
func withTopicConfig(c map[string]string) option { return func(o *topicOptions) { o.config = c } }

// withDeadLetterConfig sets configs of the dead-letter topic.
func withDeadLetterConfig(c map[string]string) option {
	return func(o *topicOptions) { o.dlqConfig = c }
}

// withReplication replicates the topics (a second broker must run).
func withReplication(n int) option { return func(o *topicOptions) { o.replication = n } }

// faultSuite skips the test unless the fault suite runs on its own, and
// fails it without the real services. Every test that changes the services
// (a broker killed, a second broker started) must call it before it does:
// the services are shared with every other package's tests while make test
// runs them in parallel, and a topic one of them created while the second
// broker was up got partitions on it, which the test then stopped. They
// stayed without a leader (a SASL or TLS client saw none at all, as broker
// 2 has neither listener): the "silent worker" of fresh clones.
func faultSuite(t *testing.T) {
	t.Helper()
	if os.Getenv("TESTENV_FAULTS") == "" {
		t.Skip("the fault suite kills the broker, so it runs on its own: TESTENV_FAULTS=short|full (make test and make faults set it)")
	}
	if !testenv.Real() || os.Getenv("TESTENV_SERVICES_DIR") == "" {
		t.Fatal("the fault suite needs the services of scripts/services.sh (make test or make faults start them)")
	}
}

// newSuite needs the real broker: the suite kills and restarts it.
//
// Each scenario has its own topics, group and table. Those that change
// nothing another sees run in parallel (t.Parallel); those that kill or add
// a broker, count the connections to the services, or hold a worker to its
// memory bound run alone (make test runs the last before the others, at a
// higher priority than the rest of the suite).
func newSuite(t *testing.T, partitions int, opts ...option) *suite {
	faultSuite(t)
	to := topicOptions{replication: 1, dlqConfig: testenv.DeadLetterConfigs}
	for _, o := range opts {
		o(&to)
	}
	s := &suite{t: t, brokers: testenv.Kafka(t), topic: testenv.Name("faults"), table: testenv.Name("faults"), workers: map[int]*worker{}}
	s.group, s.dlq = s.topic, s.topic+".dlq"
	s.event, s.maxEvent = s.poisoned, maxEventBytes
	s.dc, s.ac = testenv.Clients(t)
	createTopic(t, s.brokers, s.topic, partitions, to.replication, to.config)
	createTopic(t, s.brokers, s.dlq, 1, to.replication, to.dlqConfig)
	s.tenants = filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(s.tenants, []byte(tenantsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := tenants.Load(s.tenants)
	if err != nil {
		t.Fatal(err)
	}
	s.configs = []*tenants.Config{cfg}
	s.logf("suite: topic and table ready")
	s.bin = testenv.WorkerBinary(t)
	s.logf("suite: worker built")
	if err := lab.Run(context.Background(), s.bin, nil, "setup", "--table", s.table, "--tenants", s.tenants); err != nil {
		t.Fatal(err)
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
			w.Kill()
		}
		if t.Failed() {
			for _, w := range s.ended {
				t.Logf("worker %d (ended) output:\n%s", w.id, w.out.String())
			}
		}
		s.mu.Unlock()
		_ = s.ac.DeleteTable(context.Background(), s.table)
		_ = s.ac.DeleteTable(context.Background(), s.table+"-erasures")
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

// start runs a worker process.
func (s *suite) start(extra ...string) *worker {
	s.t.Helper()
	return s.startAs(s.bin, nil, extra...)
}

// startAs is start, of the build bin, with env beside the suite's.
func (s *suite) startAs(bin string, env []string, extra ...string) *worker {
	s.t.Helper()
	s.mu.Lock()
	id := s.nextID
	s.nextID++
	s.mu.Unlock()
	brokers := s.brokers
	if s.workerBrokers != nil {
		brokers = s.workerBrokers
	}
	args := append([]string{"run", "--brokers", strings.Join(brokers, ","), "--topic", s.topic, "--group", s.group, "--dlq-topic", s.dlq,
		"--table", s.table, "--tenants", s.tenants, "--log-format", "text", "--log-level", "warn",
		"--readiness-interval", "200ms", "--session-timeout", "6s", "--commit-interval", "200ms",
		"--drain-timeout", drainTimeout.String(), "--max-event-bytes", strconv.Itoa(s.maxEvent)}, append(append([]string{}, s.workerArgs...), extra...)...)
	w := &worker{id: id, out: &syncBuffer{}}
	p, err := lab.Start(lab.Options{Bin: bin, Args: args, Env: append(slices.Clone(s.env), env...), Log: w.out})
	if err != nil {
		s.t.Fatal(err)
	}
	w.Process = p
	s.mu.Lock()
	s.workers[id] = w
	s.mu.Unlock()
	s.logf("worker %d started (pid %d)", id, w.Pid())
	return w
}

// kill SIGKILLs a worker.
func (s *suite) kill(w *worker) {
	w.Kill()
	s.forget(w)
	s.logf("worker %d SIGKILLed", w.id)
}

// term SIGTERMs a worker and requires a clean exit within the drain
// timeout; it returns how long the drain took.
func (s *suite) term(w *worker) time.Duration {
	s.t.Helper()
	start := time.Now()
	err := w.Stop(drainTimeout + 5*time.Second)
	took := time.Since(start)
	s.forget(w)
	switch {
	case w.Killed():
		s.t.Errorf("worker %d did not exit within the drain timeout", w.id)
		return drainTimeout
	case err != nil:
		s.t.Errorf("worker %d exited with %v after SIGTERM, want 0:\n%s", w.id, err, w.out.String())
	}
	s.logf("worker %d stopped by SIGTERM in %s", w.id, took.Round(time.Millisecond))
	return took
}

func (s *suite) forget(w *worker) {
	s.mu.Lock()
	delete(s.workers, w.id)
	s.ended = append(s.ended, w)
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
	w := &kafka.Writer{Addr: kafka.TCP(s.brokers...), Topic: s.topic, Balancer: &kafka.Hash{}, BatchSize: 500, BatchBytes: 3_000_000,
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
			if ev.kind == invalid {
				sum := sha256.Sum256(v)
				ev.size, ev.sha256 = len(v), hex.EncodeToString(sum[:])
			}
			s.events = append(s.events, ev)
			// The record time is set here, once: a retry below sends the
			// same record again, as a careful producer does. (A record sent
			// again with a new time is another record: an event whose time
			// is its record's would land in a second row.)
			msgs = append(msgs, kafka.Message{Key: []byte(ev.user), Value: v, Time: ev.sentAt, Headers: []kafka.Header{{Key: "seq", Value: []byte(strconv.Itoa(i))}}})
		}
		s.mu.Unlock()
		sent := len(msgs)
		for attempt := 0; ; attempt++ {
			err := w.WriteMessages(ctx, msgs...)
			if err == nil {
				break
			}
			if ctx.Err() != nil || attempt > 120 {
				s.t.Errorf("produce: %v", err)
				return
			}
			// Send again only what failed.
			var failed kafka.WriteErrors
			if errors.As(err, &failed) && len(failed) == len(msgs) {
				var again []kafka.Message
				for i, e := range failed {
					if e != nil {
						again = append(again, msgs[i])
					}
				}
				msgs = again
			}
			time.Sleep(500 * time.Millisecond) // the broker may be down on purpose
		}
		s.sent.Add(int64(sent))
	}
}

// poisoned makes event seq: mostly valid, with each kind of poison mixed
// in, and times the worker must treat exactly.
func (s *suite) poisoned(r *rand.Rand, seq int) ([]byte, produced) {
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
		return []byte(`{"event_id":"` + id + `","tenant_id":"` + ev.tenant + `","pad":"` + strings.Repeat("p", s.maxEvent) + `"}`), ev // oversize
	case 47:
		ev.kind = invalid
		return append([]byte{0xff, 0x00, 0xfe}, id...), ev // binary garbage
	case 13:
		ev.kind = clamped
		at = now.Add(100 * 365 * 24 * time.Hour).UTC().Format(time.RFC3339Nano)
	case 23:
		ev.kind = expired
		at = "1969-07-20T20:17:40Z"
	case 33:
		ev.kind = expired // a present time means what it says: year 1
		at = "0001-01-01T00:00:00Z"
	case 43:
		ev.kind = invalid // the same field twice: readers disagree on which
		return []byte(`{"event_id":"` + id + `","tenant_id":"` + ev.tenant + `","tenant_id":"other"}`), ev
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
				w.Signal(syscall.SIGQUIT)
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
	code, body := testenv.Get(w.Admin + "/status")
	if code == 0 {
		return nil, errors.New(body)
	}
	var st map[string]any
	return st, json.Unmarshal([]byte(body), &st)
}

// waitWritten waits until worker w says it wrote want events (its
// /status totals), for as long as it goes on writing: it fails once the
// count has not grown for stall. A wait as long as this machine's
// throughput needs, read from the worker rather than by scanning a table
// of millions of rows, which would take the cores from the worker.
func (s *suite) waitWritten(w *worker, want int, stall time.Duration) {
	s.t.Helper()
	last, lastAt := -1, time.Now()
	for {
		st, err := s.status(w)
		var written int
		if err == nil {
			totals, _ := st["totals"].(map[string]any)
			f, _ := totals["written"].(float64)
			written = int(f)
		}
		if written >= want {
			return
		}
		if written > last {
			last, lastAt = written, time.Now()
		} else if time.Since(lastAt) > stall {
			s.t.Fatalf("%d of %d events written, none for %s (status: %v)", written, want, stall, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// writtenIDs returns the event ids in the table.
func (s *suite) writtenIDs() map[string]bool {
	out := map[string]bool{}
	err := s.dc.Open(s.table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		k := r.Key()
		out[k[strings.LastIndexByte(k, '#')+1:]] = true
		return true
	}, bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("^c$"), bigtable.StripValueFilter()))) // events only, not the workers' record
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// createTopic creates a topic with a replication factor and configs.
func createTopic(t *testing.T, brokers []string, topic string, partitions, replication int, configs map[string]string) {
	t.Helper()
	if replication <= 1 {
		testenv.CreateTopicWith(t, brokers, topic, partitions, configs)
		return
	}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 20 * time.Second}
	tc := kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: replication}
	for k, v := range configs {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	res, err := c.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{tc}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s with replication %d: %v", topic, replication, err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		md, err := c.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{topic}})
		if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != partitions {
			return false, fmt.Sprintf("topic %s not ready: %v", topic, err)
		}
		for _, p := range md.Topics[0].Partitions {
			if p.Leader.Host == "" || len(p.Isr) < replication {
				return false, fmt.Sprintf("partition %d of %s: leader %v, isr %v", p.ID, topic, p.Leader, p.Isr)
			}
		}
		return true, ""
	})
}

// aclAdmin manages ACLs as the super user of the plaintext listener.
type aclAdmin struct{ c *kafka.Client }

func aclClient(t *testing.T, brokers []string) aclAdmin {
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return aclAdmin{c: &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}}
}

// deny adds, or removes, an ACL denying user WRITE on topic.
func (a aclAdmin) deny(t *testing.T, user, topic string, add bool) {
	t.Helper()
	var err error
	if add {
		var res *kafka.CreateACLsResponse
		res, err = a.c.CreateACLs(context.Background(), &kafka.CreateACLsRequest{ACLs: []kafka.ACLEntry{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ResourcePatternType: kafka.PatternTypeLiteral,
			Principal: "User:" + user, Host: "*", Operation: kafka.ACLOperationTypeWrite, PermissionType: kafka.ACLPermissionTypeDeny}}})
		if err == nil && len(res.Errors) > 0 {
			err = res.Errors[0]
		}
	} else {
		_, err = a.c.DeleteACLs(context.Background(), &kafka.DeleteACLsRequest{Filters: []kafka.DeleteACLsFilter{{
			ResourceTypeFilter: kafka.ResourceTypeTopic, ResourceNameFilter: topic, ResourcePatternTypeFilter: kafka.PatternTypeLiteral,
			PrincipalFilter: "User:" + user, HostFilter: "*", Operation: kafka.ACLOperationTypeWrite, PermissionType: kafka.ACLPermissionTypeDeny}}})
	}
	if err != nil {
		t.Fatalf("ACL on %s: %v", topic, err)
	}
}

// connections lists the TCP connections of the machine with one end on
// one of ports (the services a worker talks to), by the port of the other
// end: every connection opened to those services, whoever closed it, stays
// listed for a minute after it closed (TIME_WAIT), so a connection that
// lived a millisecond is seen as well as one that stays. Connections to
// other services (another suite's broker) are not counted.
func connections(t *testing.T, ports map[int]bool) map[int]bool {
	t.Helper()
	seen := map[int]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] == "0A" { // listening
				continue
			}
			local, remote := hexPort(fs[1]), hexPort(fs[2])
			switch {
			case ports[remote]:
				seen[local] = true
			case ports[local]:
				seen[remote] = true
			}
		}
	}
	return seen
}

// hexPort is the port of a /proc/net/tcp address ("0100007F:1F90").
func hexPort(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.ParseInt(p, 16, 32)
	return int(n)
}

// portOf is the port of a host:port address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("no port in %q", addr)
	}
	return n
}

// ensureCoordinator waits until a group coordinator answers for group, so
// that __consumer_offsets exists.
func ensureCoordinator(t *testing.T, brokers []string, group string) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		res, err := c.FindCoordinator(context.Background(), &kafka.FindCoordinatorRequest{Key: group, KeyType: kafka.CoordinatorKeyTypeConsumer})
		if err == nil && res.Error != nil {
			err = res.Error
		}
		return err == nil, fmt.Sprintf("no coordinator for group %s: %v", group, err)
	})
}

// waitInSync waits until broker node is in the in-sync replicas of every
// partition of topic: a broker started again has caught up.
func waitInSync(t *testing.T, brokers []string, topic string, node int) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		md, err := c.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{topic}})
		if err != nil || len(md.Topics) != 1 {
			return false, fmt.Sprintf("metadata of %s: %v", topic, err)
		}
		for _, p := range md.Topics[0].Partitions {
			if !slices.ContainsFunc(p.Isr, func(b kafka.Broker) bool { return b.ID == node }) {
				return false, fmt.Sprintf("broker %d not in sync for %s/%d", node, topic, p.ID)
			}
		}
		return true, ""
	})
}
