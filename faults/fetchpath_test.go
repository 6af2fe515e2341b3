package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/testkit/lab"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Scenarios of the fetch path the worker reads itself, each with the worker's peak RSS sampled against
// --max-inflight-bytes: one offset stuck for good while traffic flows,
// compressed batches that decompress past every bound, and the family's
// GC rule changed under the workers.

// rssOverhead is what a worker may hold beyond --max-inflight-bytes of
// its own memory: the runtime and the clients beside the events, within
// the 24 MiB the worker gives the garbage collector over the bound, and
// room for what the collector has not returned yet (RELIABILITY.md). The
// binary's resident pages are not counted: they grew from 35 to 41 MiB
// with the code while the worker's own memory did not.
const rssOverhead = 32 << 20

// peakRSS samples the worker's own resident memory (lab.Memory's own) of pid
// every interval until ctx ends, and keeps the largest.
func peakRSS(ctx context.Context, pid int, every time.Duration) *atomic.Int64 {
	var peak atomic.Int64
	go func() {
		for ctx.Err() == nil {
			if _, _, r, err := lab.Memory(pid); err == nil && r > peak.Load() {
				peak.Store(r)
			}
			time.Sleep(every)
		}
	}()
	return &peak
}

// checkRSS fails the test when peak went past bound plus the overhead.
func checkRSS(t *testing.T, peak, bound int64) {
	t.Helper()
	t.Logf("peak resident memory of its own %d MiB with --max-inflight-bytes %d MiB (the bound + %d MiB)", peak>>20, bound>>20, (peak-bound)>>20)
	if peak > bound+rssOverhead {
		t.Errorf("peak resident memory of its own %d MiB: more than --max-inflight-bytes (%d MiB) + %d MiB", peak>>20, bound>>20, rssOverhead>>20)
	}
}

// One offset stuck for good (its dead letter refused: WRITE on the
// dead-letter topic denied), rare poison among steady good traffic: the
// worker goes on writing the good events, commits nothing past the stuck
// offset, and holds no memory for the offsets settled behind it (the
// tracker keeps only what is not settled). Once the ACL goes, everything
// is committed, exactly once.
func TestStuckOffsetMemory(t *testing.T) {
	faultSuite(t)
	saslBrokers := os.Getenv("TESTENV_SASL_BROKERS")
	if saslBrokers == "" {
		t.Fatal("needs the SASL listener of scripts/services.sh")
	}
	const partitions, bound = 3, 32 << 20
	s := newSuite(t, partitions)
	s.workerBrokers = []string{saslBrokers}
	user := os.Getenv("TESTENV_SASL_USERNAME")
	s.workerArgs = []string{"--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-username", user}
	s.env = []string{"CELLTTL_KAFKA_SASL_PASSWORD=" + os.Getenv("TESTENV_SASL_PASSWORD")}
	// One poison event in 5,000 (the dead-letter queue holds 1,524 before
	// fetching waits: millions of events).
	s.event = func(r *rand.Rand, seq int) ([]byte, produced) {
		now := time.Now()
		ev := produced{tenant: tenantIDs[seq%len(tenantIDs)], user: "u" + strconv.Itoa(seq%500), millis: now.UnixMilli(), sentAt: now}
		id := "f-" + strconv.Itoa(seq)
		if seq%5000 == 100 {
			ev.kind, ev.user = invalid, "p"+strconv.Itoa(seq) // keys spread the poison over the partitions
			return []byte(`{"event_id":"` + id + `"}`), ev
		}
		return []byte(`{"event_id":"` + id + `","tenant_id":"` + ev.tenant + `","user_id":"` + ev.user + `","occurred_at":"` + now.UTC().Format(time.RFC3339Nano) + `"}`), ev
	}
	acl := aclClient(t, s.brokers)
	acl.deny(t, user, s.dlq, true)
	s.logf("dead-letter topic: WRITE denied to the worker, for good")
	w := s.start("--max-inflight-bytes", strconv.Itoa(bound))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	peak := peakRSS(ctx, w.Pid(), 100*time.Millisecond)
	defer func() { t.Logf("worker's peak own memory %d MiB", peak.Load()>>20) }() // also when the test fails
	go s.watchLag(ctx, partitions)
	n := size(150_000, 3_000_000)
	s.produce(ctx, n, 20_000)
	s.faults++
	// Fetching goes on past the stuck offsets: every good event is
	// written, and nothing is committed past the first poison event of
	// each partition.
	valid := n - (n+4899)/5000
	s.waitWritten(w, valid, time.Minute)
	written := len(s.writtenIDs())
	if written < valid {
		t.Fatalf("%d of %d good events in the table while the dead letters wait", written, valid)
	}
	st, err := s.status(w)
	if err != nil {
		t.Fatal(err)
	}
	var committedLag float64
	for _, p := range st["kafka"].(map[string]any)["partitions"].([]any) {
		lag, _ := p.(map[string]any)["committed_lag"].(float64) // absent from a worker before it (TESTENV_WORKER_BIN)
		committedLag += lag
	}
	s.logf("all %d produced: %d written, committed lag %.0f, peak own memory so far %d MiB", n, written, committedLag, peak.Load()>>20)
	if committedLag < float64(n/2) {
		t.Errorf("committed lag %.0f of %d events: want nearly all uncommitted behind the stuck offsets", committedLag, n)
	}
	acl.deny(t, user, s.dlq, false)
	s.logf("dead-letter topic: WRITE allowed again")
	recovery := s.settle(partitions, 5*time.Minute)
	stop()
	s.term(w)
	v := s.check("stuck-offset-memory", partitions, recovery,
		fmt.Sprintf("1 worker through SASL, --max-inflight-bytes 32MiB; WRITE on the dead-letter topic denied while %d events (1 in 5,000 poison) were produced at 20,000/s; %d written meanwhile; peak own memory %d MiB", n, written, peak.Load()>>20))
	v.PeakRSSMiB, v.BoundMiB = peak.Load()>>20, bound>>20
	s.record(v)
	checkRSS(t, peak.Load(), bound)
}

// bombWriter produces batches of records of zeros compressed with codec,
// one batch per call, to the partition of key.
func bombWriter(brokers []string, topic string, codec kafka.Compression, tr *kafka.Transport) *kafka.Writer {
	return &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, Compression: codec,
		BatchBytes: 1 << 30, BatchSize: 1000, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: tr}
}

// Batches of a few kilobytes on the wire that decompress to 16 MiB a
// record (zeros, in each codec), between good events on every partition:
// each is dead-lettered as one undecodable batch, with its offsets, codec,
// size and hash, the partitions flow on, and memory stays within the
// bound. (The oracle does not read the input topic: a plain client would
// decompress the batches whole.)
func TestCompressedBatchesPastTheBound(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the broker taking a compressed batch past a fetch's limit and sending it back whole")
	partitionCounts := []int{12}
	if full() {
		partitionCounts = []int{1, 12, 48}
	}
	const bound = 16 << 20 // the fetch budget is half: 8 MiB, less than one record
	codecs := []kafka.Compression{kafka.Gzip, kafka.Snappy, kafka.Lz4, kafka.Zstd}
	for _, partitions := range partitionCounts {
		t.Run(fmt.Sprintf("%d-partitions", partitions), func(t *testing.T) {
			s := newSuite(t, partitions, withTopicConfig(map[string]string{"max.message.bytes": "4000000"}))
			s.unreadTopic = true
			s.event = func(r *rand.Rand, seq int) ([]byte, produced) {
				b, ev := s.poisoned(r, seq)
				if ev.kind == clamped { // its time would be the record's: a valid one instead
					ev.kind = valid
					b = []byte(`{"event_id":"f-` + strconv.Itoa(seq) + `","tenant_id":"` + ev.tenant + `","user_id":"` + ev.user + `","occurred_at":"` + time.UnixMilli(ev.millis).UTC().Format(time.RFC3339Nano) + `"}`)
				}
				return b, ev
			}
			w := s.start("--max-inflight-bytes", strconv.Itoa(bound))
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			peak := peakRSS(ctx, w.Pid(), 100*time.Millisecond)
			tr := &kafka.Transport{}
			defer tr.CloseIdleConnections()
			const perCodec, records = 6, 4
			n := size(20_000, 60_000)
			go s.watchLag(ctx, partitions)
			done := background(func() { s.produce(ctx, n, 4000) })
			zeros := make([]byte, 16<<20)
			for round := range perCodec {
				for _, codec := range codecs {
					bw := bombWriter(s.brokers, s.topic, codec, tr)
					msgs := make([]kafka.Message, records)
					for i := range msgs {
						msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("bomb-%d", round)), Value: zeros}
					}
					if err := bw.WriteMessages(ctx, msgs...); err != nil {
						t.Fatalf("produce a %s batch: %v", codec, err)
					}
					_ = bw.Close()
				}
				time.Sleep(time.Second)
			}
			done()
			s.faults = perCodec * len(codecs)
			recovery := s.settle(partitions, 3*time.Minute)
			stop()
			s.term(w)
			// Every batch dead-lettered once, as one message: its offsets,
			// codec, size and hash.
			byCodec, offsets := map[string]int{}, 0
			seen := map[string]bool{}
			for _, m := range testenv.ReadToEnd(t, s.brokers, s.dlq) {
				if header(m, deadletter.HeaderSourceOffsetLast) == "" {
					continue
				}
				first, _ := strconv.Atoi(header(m, deadletter.HeaderSourceOffset))
				last, _ := strconv.Atoi(header(m, deadletter.HeaderSourceOffsetLast))
				at := header(m, deadletter.HeaderSourcePartition) + "/" + strconv.Itoa(first)
				if seen[at] {
					t.Errorf("batch at %s dead-lettered twice", at)
				}
				seen[at] = true
				byCodec[header(m, deadletter.HeaderBatchCodec)]++
				offsets += last - first + 1
				if m.Value != nil || len(header(m, deadletter.HeaderBatchSHA256)) != 64 || header(m, deadletter.HeaderBatchSize) == "" ||
					!strings.Contains(header(m, deadletter.HeaderReason), "decompresses to more than") {
					t.Errorf("dead letter of batch %s: value of %d bytes, headers %v", at, len(m.Value), m.Headers)
				}
			}
			for _, c := range codecs {
				if byCodec[c.String()] != perCodec {
					t.Errorf("%d %s batches dead-lettered, want %d (by codec: %v)", byCodec[c.String()], c, perCodec, byCodec)
				}
			}
			if offsets != perCodec*len(codecs)*records {
				t.Errorf("dead letters cover %d offsets, want the %d records of the batches", offsets, perCodec*len(codecs)*records)
			}
			v := s.check(fmt.Sprintf("compressed-batches-%dp", partitions), partitions, recovery,
				fmt.Sprintf("1 worker, --max-inflight-bytes 16MiB (8 MiB a batch); %d batches of 4 records of 16 MiB of zeros (%v) between %d events on %d partitions; peak own memory %d MiB",
					perCodec*len(codecs), codecs, n, partitions, peak.Load()>>20))
			v.PeakRSSMiB, v.BoundMiB = peak.Load()>>20, bound>>20
			s.record(v)
			checkRSS(t, peak.Load(), bound)
		})
	}
}

// The family's GC rule changed under two running workers (set longer, so
// that nothing is collected early): within --gc-rule-check-interval both
// stop writing and say so on /readyz, nothing is written or
// dead-lettered meanwhile; the rule set back, they go on, and everything
// is written exactly once at the contract's timestamps.
func TestGCRuleChangedUnderWorkers(t *testing.T) {
	const partitions, bound = 6, 32 << 20
	s := newSuite(t, partitions)
	workers := []*worker{s.start("--gc-rule-check-interval", "1s", "--max-inflight-bytes", strconv.Itoa(bound)),
		s.start("--gc-rule-check-interval", "1s", "--max-inflight-bytes", strconv.Itoa(bound))}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	peaks := []*atomic.Int64{peakRSS(ctx, workers[0].Pid(), 100*time.Millisecond), peakRSS(ctx, workers[1].Pid(), 100*time.Millisecond)}
	go s.watchLag(ctx, partitions)
	n := size(40_000, 150_000)
	done := background(func() { s.produce(ctx, n, 2000) })
	for s.sent.Load() < int64(n/4) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.ac.SetGCPolicy(ctx, s.table, "c", bigtable.MaxAgePolicy(72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.logf("GC rule set to max-age 3d under the workers")
	s.faults++
	for _, w := range workers {
		testenv.Eventually(t, 15*time.Second, func() (bool, string) {
			code, body := testenv.Get(w.Admin + "/readyz")
			return code == 503 && strings.Contains(body, `GC rule "max-age 3d", the configuration needs "max-age 2d"`), fmt.Sprintf("worker %d /readyz %d: %s", w.id, code, body)
		})
	}
	time.Sleep(time.Second) // writes under way when the rule was seen finish
	held := len(s.writtenIDs())
	s.logf("both workers hold their writes: %d rows", held)
	time.Sleep(5 * time.Second)
	if now := len(s.writtenIDs()); now != held {
		t.Errorf("%d rows written while the rule disagreed with the tenants file", now-held)
	}
	if err := s.ac.SetGCPolicy(ctx, s.table, "c", bigtable.MaxAgePolicy(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.logf("GC rule set back to max-age 2d")
	done()
	recovery := s.settle(partitions, 3*time.Minute)
	for _, w := range workers {
		// /readyz answers from checks run every --readiness-interval.
		testenv.Eventually(t, 5*time.Second, func() (bool, string) {
			code, body := testenv.Get(w.Admin + "/readyz")
			return code == 200, fmt.Sprintf("worker %d /readyz %d after the rule was set back: %s", w.id, code, body)
		})
	}
	stop()
	for _, w := range workers {
		s.term(w)
	}
	peak := max(peaks[0].Load(), peaks[1].Load())
	v := s.check("gc-rule-changed", partitions, recovery,
		fmt.Sprintf("2 workers, --gc-rule-check-interval 1s; the family's GC rule set to 3d for about 7s while %d events flowed; no row written meanwhile; peak own memory %d MiB", n, peak>>20))
	v.PeakRSSMiB, v.BoundMiB = peak>>20, bound>>20
	s.record(v)
	checkRSS(t, peak, bound)
}
