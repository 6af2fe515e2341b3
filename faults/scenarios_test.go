package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Events of up to 1.5 MiB on an input topic that allows 4 MB, with the
// dead-letter topic at the broker's default limit: valid ones at exactly
// --max-event-bytes are written; one byte over, and invalid ones just under
// the topic's limit, are dead-lettered cut to fit (original size and
// SHA-256 in headers), and nothing waits.
func TestOversizeEvents(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the broker's max.message.bytes, and what it answers past it")
	t.Parallel()
	const partitions = 6
	s := newSuite(t, partitions, withTopicConfig(map[string]string{"max.message.bytes": "4000000"}))
	const maxEvent = 1 << 20
	padded := func(id, tenant, user string, size int) []byte {
		head := `{"event_id":"` + id + `","tenant_id":"` + tenant + `","user_id":"` + user + `","pad":"`
		return []byte(head + strings.Repeat("p", size-len(head)-2) + `"}`)
	}
	s.event = func(r *rand.Rand, seq int) ([]byte, produced) {
		if seq%100 != 50 {
			return s.poisoned(r, seq)
		}
		ev := produced{tenant: tenantIDs[seq%len(tenantIDs)], user: "u" + strconv.Itoa(seq%7), sentAt: time.Now()}
		id := "f-" + strconv.Itoa(seq)
		switch seq / 100 % 4 {
		case 0: // at the limit: valid, a 1 MiB cell, its time the record's
			ev.kind, ev.fromRecord = valid, true
			return padded(id, ev.tenant, ev.user, maxEvent), ev
		case 1: // one byte over
			ev.kind = invalid
			return padded(id, ev.tenant, ev.user, maxEvent+1), ev
		case 2: // far over
			ev.kind = invalid
			return padded(id, ev.tenant, ev.user, 1536<<10), ev
		default: // not JSON, just under the dead-letter topic's limit
			ev.kind = invalid
			return []byte(strings.Repeat("n", 1<<20-100)), ev
		}
	}
	n := size(3000, 12000)
	s.maxEvent = maxEvent // also the size of the suite's own oversize poison
	s.start()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go s.watchLag(ctx, partitions)
	s.produce(ctx, n, 1000)
	recovery := s.settle(partitions, 3*time.Minute)
	for _, w := range s.running() {
		s.term(w)
	}
	v := s.check("oversize-events", partitions, recovery, "input topic allows 4 MB, dead-letter topic 1 MiB; every 100th event at, 1 byte over, or 0.5 MiB over --max-event-bytes (1 MiB), or invalid just under 1 MiB")
	if v.Truncated == 0 {
		t.Error("no dead letter was cut to fit")
	}
}

// Every write refused as a whole for a while, with each code about
// content: an outage, never blamed on events. /readyz says so meanwhile.
func TestBigtableRefusesWholeRequests(t *testing.T) {
	t.Parallel()
	const partitions = 6
	s := newSuite(t, partitions)
	proxy := testenv.StartBigtableProxy(t, os.Getenv("BIGTABLE_EMULATOR_HOST"))
	s.env = []string{"BIGTABLE_EMULATOR_HOST=" + proxy.Addr}
	w := s.start("--write-timeout", "2s")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go s.watchLag(ctx, partitions)
	// Every code is an outage for the writer (sink's tests try each
	// against a proxy); the short form takes two of them end to end, the
	// long form all five. Events flow through every window (at most 10s
	// each) and after.
	codesToTry := []codes.Code{codes.InvalidArgument, codes.PermissionDenied}
	if full() {
		codesToTry = []codes.Code{codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.PermissionDenied, codes.NotFound}
	}
	rate := 1000
	n := rate * (10 + 12*len(codesToTry))
	wait := background(func() { s.produce(ctx, n, rate) })
	time.Sleep(2 * time.Second)
	for _, code := range codesToTry {
		var refused atomic.Int64
		proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
			refused.Add(1)
			return testenv.MutateRowsFault{Refuse: status.Error(code, "injected: every request refused")}
		})
		s.logf("bigtable refuses every MutateRows with %s", code)
		testenv.Eventually(t, 10*time.Second, func() (bool, string) {
			code, _ := testenv.Get(w.Admin + "/readyz")
			return code == 503 && refused.Load() > 2, fmt.Sprintf("/readyz %d with every write refused (%d refusals)", code, refused.Load())
		})
		time.Sleep(2 * time.Second)
		proxy.SetFault(nil)
		s.faults++
		s.logf("bigtable takes writes again after %d refusals", refused.Load())
		time.Sleep(2 * time.Second)
	}
	wait()
	recovery := s.settle(partitions, 3*time.Minute)
	stop()
	s.term(w)
	s.check("bigtable-whole-request-refusals", partitions, recovery,
		fmt.Sprintf("every MutateRows refused for 4s with %v in turn (a proxy in front of the emulator)", codesToTry))
}

// tenants.yaml rewritten in place, slowly, line by line, while events flow:
// every event's cells follow the old file or the new one, never a prefix
// that drops tenants to the default TTL.
func TestSlowTenantsEdit(t *testing.T) {
	t.Parallel()
	const partitions = 6
	s := newSuite(t, partitions)
	const edited = `strategy: default-expiration
default_ttl: 2d
record_real_timestamp: true
tenants:
  acme: 2h
  globex: 4d
  initech: 5h
  umbrella: 6h
`
	next, err := tenants.Parse([]byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	s.configs = append(s.configs, next)
	s.start("--tenants-reload-interval", "1s")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go s.watchLag(ctx, partitions)
	n := size(20000, 60000)
	wait := background(func() { s.produce(ctx, n, 2000) })
	for s.sent.Load() < int64(n/3) {
		time.Sleep(100 * time.Millisecond)
	}
	f, err := os.OpenFile(s.tenants, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.logf("tenants.yaml: rewriting in place, a line every 150ms")
	for _, line := range strings.SplitAfter(edited, "\n") {
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	f.Close()
	s.logf("tenants.yaml: written")
	s.faults++
	wait()
	recovery := s.settle(partitions, 3*time.Minute)
	for _, w := range s.running() {
		st, err := s.status(w)
		if err == nil {
			if cfg, ok := st["config"].(map[string]any); ok && cfg["version"] != next.Version {
				t.Errorf("worker %d runs config %v after the edit, want %s", w.id, cfg["version"], next.Version)
			}
		}
		s.term(w)
	}
	s.check("slow-tenants-edit", partitions, recovery, "tenants.yaml rewritten in place a line every 150ms (poll every 1s) while 2,000 events/s flow; cells follow the old or the new file")
}

// The same records consumed by two groups into one table, at once: one row
// per event, one version per cell, even for clamped and year-1 times.
func TestTwoGroupsOneTable(t *testing.T) {
	t.Parallel()
	const partitions = 6
	s := newSuite(t, partitions)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	n := size(20000, 60000)
	s.produce(ctx, n, 5000)
	first := s.group
	a := s.start()
	s.group = testenv.Name("second")
	b := s.start()
	recovery := s.settle(partitions, 3*time.Minute)
	s.group = first
	s.settle(partitions, 3*time.Minute)
	s.term(a)
	s.term(b)
	s.check("two-groups-one-table", partitions, recovery, "one worker in each of two consumer groups over the same records, into one table")
}

// The dead-letter topic refuses the workers (an ACL denies them WRITE) for
// a while: the bad events' offsets wait, nothing is lost, good events of
// other partitions flow, and everything catches up when the ACL goes.
func TestDeadLetterTopicUnwritableForAWhile(t *testing.T) {
	t.Parallel()
	faultSuite(t)
	saslBrokers := os.Getenv("TESTENV_SASL_BROKERS")
	if saslBrokers == "" {
		t.Fatal("needs the SASL listener of scripts/services.sh")
	}
	const partitions = 6
	s := newSuite(t, partitions)
	s.workerBrokers = []string{saslBrokers}
	user := os.Getenv("TESTENV_SASL_USERNAME")
	s.workerArgs = []string{"--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-username", user}
	s.env = []string{"CELLTTL_KAFKA_SASL_PASSWORD=" + os.Getenv("TESTENV_SASL_PASSWORD")}
	s.start()
	s.start()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go s.watchLag(ctx, partitions)
	n := size(30000, 100000)
	wait := background(func() { s.produce(ctx, n, 2500) })
	for s.sent.Load() < int64(n/4) {
		time.Sleep(100 * time.Millisecond)
	}
	acl := aclClient(t, s.brokers)
	acl.deny(t, user, s.dlq, true)
	s.logf("dead-letter topic: WRITE denied to the workers")
	time.Sleep(time.Duration(size(5, 10)) * time.Second)
	acl.deny(t, user, s.dlq, false)
	s.logf("dead-letter topic: WRITE allowed again")
	s.faults++
	wait()
	recovery := s.settle(partitions, 3*time.Minute)
	for _, w := range s.running() {
		s.term(w)
	}
	s.check("dead-letter-topic-unwritable", partitions, recovery, fmt.Sprintf("2 workers through SASL; WRITE on the dead-letter topic denied to them for %ds", size(5, 10)))
}

// A backlog of large events on many partitions with Bigtable frozen: peak
// RSS stays within --max-inflight-bytes and a fixed overhead, whatever the
// number of partitions or the size of the events. Then Bigtable comes back
// and everything is written exactly once.
func TestMemoryUnderBacklog(t *testing.T) {
	type shape struct{ partitions, size int }
	shapes := []shape{{12, 64 << 10}, {48, 1_000_000}}
	if full() {
		shapes = nil
		for _, p := range []int{1, 12, 48} {
			for _, sz := range []int{100, 64 << 10, 1_000_000} {
				shapes = append(shapes, shape{p, sz})
			}
		}
	}
	const bound = 32 << 20
	for _, sh := range shapes {
		t.Run(fmt.Sprintf("%d-partitions-%d-bytes", sh.partitions, sh.size), func(t *testing.T) {
			s := newSuite(t, sh.partitions, withTopicConfig(map[string]string{"max.message.bytes": "4000000"}))
			s.maxEvent = 1 << 20
			s.event = func(r *rand.Rand, seq int) ([]byte, produced) {
				now := time.Now()
				ev := produced{tenant: tenantIDs[seq%len(tenantIDs)], user: "u" + strconv.Itoa(seq%100), millis: now.UnixMilli(), sentAt: now}
				head := `{"event_id":"f-` + strconv.Itoa(seq) + `","tenant_id":"` + ev.tenant + `","user_id":"` + ev.user + `","occurred_at":"` + now.UTC().Format(time.RFC3339Nano) + `","pad":"`
				return []byte(head + strings.Repeat("p", max(0, sh.size-len(head)-2)) + `"}`), ev
			}
			proxy := toxiproxyFor(t, os.Getenv("BIGTABLE_EMULATOR_HOST"))
			s.env = []string{"BIGTABLE_EMULATOR_HOST=" + proxy.Listen}
			w := s.start("--max-inflight-bytes", strconv.Itoa(bound), "--write-timeout", "5s")
			testenv.Eventually(t, 30*time.Second, func() (bool, string) {
				st, err := s.status(w)
				return err == nil && st["kafka"].(map[string]any)["joined"] == true, fmt.Sprintf("worker not in the group: %v", err)
			})
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			peak := peakRSS(ctx, w.Pid(), 100*time.Millisecond)
			freeze(t, proxy)
			s.logf("bigtable frozen")
			// A backlog of three times the bound.
			n := max(50, 3*bound/(sh.size+256))
			s.produce(ctx, n, max(200, 20<<20/(sh.size+256)))
			time.Sleep(time.Duration(size(5, 10)) * time.Second) // the budget fills and stays full
			s.logf("bigtable back; peak own memory so far %d MiB", peak.Load()>>20)
			thaw(t, proxy)
			s.faults++
			recovery := s.settle(sh.partitions, 3*time.Minute)
			stop()
			s.term(w)
			p := peak.Load()
			v := s.judge(s.observe(sh.partitions))
			v.Scenario = fmt.Sprintf("memory-%dp-%dB", sh.partitions, sh.size)
			v.Recovery, v.PeakRSSMiB, v.BoundMiB, v.Faults = recovery.Round(100*time.Millisecond).String(), p>>20, bound>>20, 1
			v.Notes = fmt.Sprintf("1 worker, --max-inflight-bytes 32MiB; %d events of %d bytes on %d partitions produced while Bigtable was frozen; peak own memory %d MiB (the bound + %d MiB)",
				n, sh.size, sh.partitions, p>>20, (p-bound)>>20)
			t.Logf("%s", v.Notes)
			for _, pr := range v.problems {
				t.Error(pr)
			}
			s.record(v)
			checkRSS(t, p, bound)
		})
	}
}

// An idle worker on many partitions keeps its connections: no connection
// per partition, none opened every few seconds to measure lag.
func TestNoConnectionChurn(t *testing.T) {
	const partitions = 12
	s := newSuite(t, partitions)
	w := s.start()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	s.produce(ctx, 1000, 5000)
	s.settle(partitions, time.Minute)
	time.Sleep(2 * time.Second)
	// The connections to the broker and the emulator, kept or opened while
	// the worker idles (the suite itself reads nothing meanwhile).
	ports := map[int]bool{portOf(t, s.brokers[0]): true, portOf(t, os.Getenv("BIGTABLE_EMULATOR_HOST")): true}
	before := connections(t, ports)
	window := time.Duration(size(10, 20)) * time.Second
	time.Sleep(window)
	opened := 0
	for port := range connections(t, ports) {
		if !before[port] {
			opened++
		}
	}
	t.Logf("TCP connections opened to the broker and the emulator in %s with the worker idle on %d partitions: %d", window, partitions, opened)
	s.term(w)
	v := s.judge(s.observe(partitions))
	v.Scenario, v.Notes = "no-connection-churn", fmt.Sprintf("1 worker idle on %d partitions for %s: %d TCP connections opened to the broker and the emulator", partitions, window, opened)
	s.record(v)
	if limit := int(window / (2 * time.Second)); opened > limit {
		t.Errorf("%d TCP connections opened in %s by an idle worker on %d partitions (at most %d)", opened, window, partitions, limit)
	}
}

// Partition leaders move while workers read: broker 2 is killed (its
// partitions' leadership goes to broker 1), started again, and a preferred
// election moves leadership back. The affected partitions' errors are
// retried for them alone: the group's generation stays (no rebalance), and
// nothing is lost or duplicated.
func TestLeaderChanges(t *testing.T) {
	testenv.BrokerVersionMatters(t, "leader elections and the coordinator moving")
	faultSuite(t)
	const partitions = 6
	// The group's coordinator must stay on broker 1: killing it would be
	// another fault. Group coordinators live with __consumer_offsets, which
	// the broker creates at the first request for a coordinator: make sure
	// it exists before broker 2 joins.
	ensureCoordinator(t, testenv.Kafka(t), "cellttl-leader-changes")
	services(t, "kafka2-start")
	t.Cleanup(func() { _ = exec.Command("../scripts/services.sh", "kafka2-stop").Run() })
	s := newSuite(t, partitions, withReplication(2))
	workers := []*worker{s.start(), s.start()}
	generation := func(w *worker) float64 {
		st, err := s.status(w)
		if err != nil {
			return -1
		}
		k := st["kafka"].(map[string]any)
		if k["joined"] != true || len(k["partitions"].([]any)) != partitions/len(workers) {
			return -1
		}
		return k["generation"].(float64)
	}
	var gen float64
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		g0, g1 := generation(workers[0]), generation(workers[1])
		gen = g0
		return g0 > 0 && g0 == g1, fmt.Sprintf("generations %v and %v", g0, g1)
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go s.watchLag(ctx, partitions)
	n := size(30000, 90000)
	wait := background(func() { s.produce(ctx, n, 1500) })
	for s.sent.Load() < int64(n/4) {
		time.Sleep(100 * time.Millisecond)
	}
	services(t, "kafka2-kill")
	s.logf("broker 2 SIGKILLed: its partitions' leadership moves to broker 1")
	s.faults++
	time.Sleep(time.Duration(size(4, 8)) * time.Second)
	services(t, "kafka2-start")
	s.logf("broker 2 back")
	waitInSync(t, s.brokers, s.topic, 2)
	services(t, "elect-preferred")
	s.logf("preferred leader election: leadership back to broker 2")
	s.faults++
	wait()
	recovery := s.settle(partitions, 3*time.Minute)
	for _, w := range workers {
		if g := generation(w); g != gen {
			t.Errorf("worker %d: generation %v → %v: a leader change rebalanced the group; its log:\n%s", w.id, gen, g, w.out.String())
		}
	}
	for _, w := range workers {
		s.term(w)
	}
	s.check("leader-changes", partitions, recovery, "2 workers, replication 2 over two brokers; broker 2 killed (leaders move to broker 1), restarted, then a preferred election moves them back; the group's generation stays")
}

// A worker paused (a frozen host, a SIGSTOP) across its input topic's
// deletion and re-creation fetches at its old position when it resumes,
// well within its session: the new log, already past that position, or
// at it, answers without an error, and nothing in the answer tells the
// incarnations apart. Read from there, the new topic's first records
// would never be written (at the position, nothing would be read until
// another record came), and a commit would make it so for good. Every
// event of the new incarnation has its row.
func TestPausedAcrossTopicRecreation(t *testing.T) {
	for name, fresh := range map[string]int{"past the old position": 90, "up to the old position": 30} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pausedAcrossTopicRecreation(t, fresh)
		})
	}
}

// pausedAcrossTopicRecreation fills the topic with 30 events a partition,
// pauses the worker, creates the topic again with fresh events a
// partition, and lets the worker go on.
func pausedAcrossTopicRecreation(t *testing.T, fresh int) {
	const partitions = 3
	s := newSuite(t, partitions)
	w := s.start("--session-timeout", "45s")
	clicks := func(prefix string, n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = fmt.Appendf(nil, `{"event_id":"%s-%d","tenant_id":"acme","user_id":"u-%d"}`, prefix, i, i%7)
		}
		return out
	}
	testenv.Produce(t, s.brokers, s.topic, clicks("old", 30*partitions)...)
	s.settle(partitions, time.Minute)

	w.Signal(syscall.SIGSTOP)
	s.logf("worker %d SIGSTOPped", w.id)
	// Past the fetch's longest wait: the broker has answered the fetch in
	// flight (nothing new) before the topic goes, and the worker's next
	// fetch goes out after it is back.
	time.Sleep(3 * time.Second)
	testenv.RecreateTopic(t, s.brokers, s.topic, partitions, nil)
	testenv.Produce(t, s.brokers, s.topic, clicks("new", fresh*partitions)...)
	w.Signal(syscall.SIGCONT)
	s.logf("worker %d SIGCONTed", w.id)
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		written := 0
		for id := range s.writtenIDs() {
			if strings.HasPrefix(id, "new-") {
				written++
			}
		}
		return written == fresh*partitions, fmt.Sprintf("%d of the new incarnation's %d events written", written, fresh*partitions)
	})
	s.term(w)
}
