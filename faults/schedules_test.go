package faults

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// The retention promise searched for its next hole, in the manner of
// Jepsen: a seeded generator of schedules (producers stamping times ahead,
// behind and not at all, headers named like the worker's, tenants listed
// and not; worker forget with and without --before; replays by new groups,
// offset resets, redrives, restarts, a second member of the group coming
// and going, a tenant listed at run time, a TTL lengthened and shortened
// again, worker retime beside a forget, the ledger table refusing the
// workers' reads; topics stamped as Kafka 3 or 4 does by default or by
// the broker, and set to another stamping; a letter forged ahead; the
// broker's retention deleting segments under a retention.ms of seconds; a
// tenant offboarded, and brought back), run against the real broker and emulator,
// then a checker of the promises after every step (schedcheck_test.go).
// The menu is the threat model of docs/threat-model.md (scheduleMenu). A failing schedule prints its
// seed; TESTENV_SCHEDULE_SEED=N replays it alone.
//
// The short form (make test) tries a few schedules, the long form (make
// faults) more and longer ones; RELIABILITY.md says how many and what they
// found.
func TestRetentionSchedules(t *testing.T) {
	testenv.BrokerVersionMatters(t, "record timestamps under each stamping, segments deleted by retention, the group's rebalances")
	faultSuite(t)
	seeds := []uint64{}
	if v := os.Getenv("TESTENV_SCHEDULE_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TESTENV_SCHEDULE_SEED=%q: %v", v, err)
		}
		seeds = append(seeds, seed)
	} else {
		base := uint64(time.Now().UnixNano())
		for i := range size(3, 12) {
			seeds = append(seeds, base+uint64(i))
		}
	}
	steps := size(20, 36)
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			sc := newSchedule(t, seed)
			for _, a := range sc.plan(steps) {
				a.run(sc)
				sc.observe()
			}
			sc.check()
		})
	}
}

// scheduleTenants: fast lives seconds, so that an erasure's record of the
// build before expired within a schedule; newco is unlisted (its events
// are letters) until a step lists it.
const scheduleTenants = "default_ttl: 2d\nunlisted_tenants: dead-letter\nrecord_real_timestamp: true\ntenants:\n  fast: 10s\n  acme: 1h\n  globex: 3d\n"

// scheduleSkew is the workers' --max-clock-skew in a schedule.
const scheduleSkew = 5 * time.Second

// scheduleTopicCheck is the workers' --dlq-check-interval: how soon they
// read a topic's changed settings.
const scheduleTopicCheck = time.Second

// schedEvent is a record a schedule produced, and where it went.
type schedEvent struct {
	id, tenant, user string
	own              time.Time // occurred_at; zero when the event has none
	rec              int64     // the record timestamp, Unix ms; -1: none
	seq              int       // its place in the schedule's events
	partition        int
	offset           int64
	sentAt           time.Time
	forged           bool // carries a header named like the worker's
	incarnation      int  // of the input topic it was produced to (sc.topicIDs)
}

// schedForget is an erasure a schedule made: what it asked and knew when
// forget began, and what the receipt says.
type schedForget struct {
	tenant, user string
	before       time.Time     // --before; zero without
	backups      time.Duration // --backup-retention; zero without
	acked        int           // the events acknowledged when forget began (sc.events[:acked])
	upTo         time.Time     // the receipt's erased_up_to
	ends         []int64       // the receipt's mark; nil with --before
	incarnation  int           // of the input topic the mark's offsets are of
	returned     time.Time
	expires      time.Time // the receipt's ledger record's; zero: in force until retired
}

type schedule struct {
	t      *testing.T
	s      *suite
	r      *mrand.Rand
	seed   uint64
	main   *worker
	second *worker                // a second live member of the main group, when running
	proxy  *testenv.BigtableProxy // between the workers and Bigtable
	favour []schedForget          // while set, half the events drawn are of these users
	only   string                 // while set, every event drawn is of this tenant
	// withinHour, while set, stamps no record past 59 minutes ahead: one
	// past a topic's hour bound has the broker refuse its whole batch.
	withinHour bool
	// keepable, while set, draws events that promise 4 holds: of a
	// tenant of an hour or more, their records stamped 30 s to 59 min
	// ahead.
	keepable bool
	keys     string // the letter key file
	client   *kafka.Client
	events   []schedEvent
	forgets  []schedForget
	// offboards are the tenants that left, in order (schedoffboard_test.go).
	offboards []schedOffboard
	done      []string // the steps taken, for a failure
	listed    bool     // newco is listed
	// fastTTL is fast's TTL in the tenants file now; fastTTLs, every one
	// it has had, which its rows may have been written under.
	fastTTL  time.Duration
	fastTTLs map[time.Duration]bool
	// fastEdits are the edits of fast's TTL, in order: when each file
	// was written, and fast's TTL in it.
	fastEdits []ttlEdit
	// inputStamping and dlqStamping are how the topics stamp their
	// records now (schedtopics_test.go); forged, the letters a producer
	// forged in the dead-letter topic.
	inputStamping, dlqStamping stamping
	stamped                    map[string]map[stamping]bool // by topic, each stamping it has had
	forged                     []forgedLetter
	// topicIDs are the input topic's incarnations, in order: each time
	// recreateTopic deleted it and created it again, a new id.
	topicIDs []string
	seen     seen // what the checker observed
}

// ttlEdit is a tenants file written at a time, with fast's TTL in it.
type ttlEdit struct {
	at  time.Time
	ttl time.Duration
}

// scheduleExactForever is the workers' --erasure-exact-forever: a worker
// started after the second erasure (a replay, a restart) holds the rest
// compact and looks their users up, the path the rest of the suite meets
// least. The topic keeps its records stamped ahead, so every erasure with
// a mark is kept forever until retired.
const scheduleExactForever = "1"

func newSchedule(t *testing.T, seed uint64) *schedule {
	sc := &schedule{t: t, r: mrand.New(mrand.NewPCG(seed, seed^0x5eed)), seed: seed,
		fastTTL: scheduleTTLs["fast"], fastTTLs: map[time.Duration]bool{scheduleTTLs["fast"]: true}}
	// The input topic stamps as Kafka 3 does by default (producers any
	// time ahead: the schedules stamp records up to an hour ahead, which
	// the broker's clock may find just past), as Kafka 4 does (an hour),
	// or by the broker's clock; the dead-letter topic mostly as the worker
	// creates it (LogAppendTime), else as an operator's may be. The input
	// topic's stamping is the seed's modulo three: a run's seeds follow
	// each other, so each run has a schedule of each.
	sc.inputStamping = stamping(seed % uint64(len(stampingNames)))
	sc.dlqStamping = brokerStamps
	if sc.r.IntN(3) == 0 {
		sc.dlqStamping = stamping(sc.r.IntN(2))
	}
	s := newSuite(t, 3, withTopicConfig(sc.inputStamping.configs(inputRetention, inputSegment)),
		withDeadLetterConfig(sc.dlqStamping.configs(dlqRetention, dlqSegment)))
	sc.stamped = map[string]map[stamping]bool{s.topic: {sc.inputStamping: true}, s.dlq: {sc.dlqStamping: true}}
	if err := os.WriteFile(s.tenants, []byte(scheduleTenants), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	sc.s, sc.client = s, &kafka.Client{Addr: kafka.TCP(s.brokers...), Timeout: 10 * time.Second, Transport: tr}
	sc.topicIDs = []string{sc.topicID("")}
	sc.note("topics: %s (%s) stamps %s, %s stamps %s", s.topic, sc.topicIDs[0], sc.inputStamping, s.dlq, sc.dlqStamping)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	sc.keys = filepath.Join(t.TempDir(), "letter-keys")
	if err := os.WriteFile(sc.keys, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("schedule seed=%d (replay: TESTENV_SCHEDULE_SEED=%d), steps:\n  %s", seed, seed, strings.Join(sc.done, "\n  "))
		}
	})
	sc.proxy = testenv.StartBigtableProxy(t, os.Getenv("BIGTABLE_EMULATOR_HOST"))
	s.env = append(s.env, "BIGTABLE_EMULATOR_HOST="+sc.proxy.Addr)
	sc.main = sc.startWorker(s.group)
	return sc
}

// flags are what every command of the schedule shares with the workers:
// forget waits the bound the workers' --erasure-refresh and
// --write-timeout give (3 × 200 ms + 2 s) before its second pass.
func (sc *schedule) flags() []string {
	return []string{"--brokers", strings.Join(sc.s.brokers, ","), "--topic", sc.s.topic, "--dlq-topic", sc.s.dlq, "--table", sc.s.table,
		"--tenants", sc.s.tenants, "--max-clock-skew", scheduleSkew.String(), "--erasure-refresh", "200ms", "--write-timeout", "2s", "--log-format", "text"}
}

// startWorker starts a worker of group and waits until it is ready: a
// SIGTERM before its signal handler is installed kills it, which is no
// drain to test.
//
// Half the workers run on a host clock off the brokers' and Bigtable's, up
// to 10 s ahead or behind (the build forget's clock moves in): cells are a
// function of the record, a worker judges an event's expiry and a ledger
// record's by one clock, and places letters with 10 s to spare.
func (sc *schedule) startWorker(group string) *worker {
	sc.t.Helper()
	skew := sc.workerSkew()
	bin := sc.s.bin
	if skew != 0 {
		bin = forgetBinary(sc.t, sc.s.bin)
		sc.note("a worker of %s starts with its clock %s off", group, skew)
	}
	w := sc.s.startAs(bin, []string{"TESTENV_CLOCK_SKEW=" + skew.String()}, "--group", group, "--max-clock-skew", scheduleSkew.String(), "--erasure-refresh", "200ms", "--write-timeout", "2s",
		"--dlq-signing-key-file", sc.keys, "--tenants-reload-interval", "200ms", "--erasure-exact-forever", scheduleExactForever,
		"--dlq-check-interval", scheduleTopicCheck.String())
	if err := w.WaitReady(context.Background(), 100*time.Millisecond, 30*time.Second); err != nil {
		sc.t.Fatalf("worker %d: %v", w.id, err)
	}
	return w
}

// scheduleAction is an action of the generator's menu: its name (the one
// docs/threat-model.md gives the rows it tries), how often a
// step draws it (its weight out of the menu's sum), and what it does.
type scheduleAction struct {
	name   string
	weight int
	run    func(*schedule)
}

// scheduleMenu is what a step may draw, weighted towards producing and
// erasing. TestThreatModelNamesTheMenu holds it and the threat model's
// tables together: each action tries a row, and each row names the
// actions that try it or says it is not drawn.
var scheduleMenu = []scheduleAction{
	{"produce", 6, (*schedule).produce},
	{"forget", 5, (*schedule).forget},
	{"wait", 3, (*schedule).wait},
	{"replay", 3, (*schedule).replay},
	{"restart", 1, (*schedule).restart},
	{"resetOffsets", 1, (*schedule).resetOffsets},
	{"redrive", 1, (*schedule).redrive},
	{"editTTL", 1, (*schedule).editTTL},
	{"retimeBesideForget", 1, (*schedule).retimeBesideForget},
	{"list", 1, (*schedule).list},
	{"secondMember", 2, (*schedule).secondMember},
	{"ledgerOutage", 1, (*schedule).ledgerOutage},
	{"restamp", 1, (*schedule).restamp},
	{"forgeLetter", 1, (*schedule).forgeLetter},
	{"recreateTopic", 1, (*schedule).recreateTopic},
	{"pauseAcrossRecreate", 1, (*schedule).pauseAcrossRecreate},
	{"offboard", 1, (*schedule).offboard},
	{"rejoin", 1, (*schedule).rejoin},
}

// plan draws the schedule's steps: the first produces, every action of
// the menu comes once at a place drawn, and the rest are drawn by the
// menu's weights. Drawn by weight alone, an action of weight 1 was in
// fewer than half the short form's schedules, and so was each hole it
// alone reaches.
func (sc *schedule) plan(steps int) []scheduleAction {
	total := 0
	for _, a := range scheduleMenu {
		total += a.weight
	}
	weighted := func() scheduleAction {
		n := sc.r.IntN(total)
		for _, a := range scheduleMenu {
			if n < a.weight {
				return a
			}
			n -= a.weight
		}
		panic("unreachable: n is below the weights' sum")
	}
	rest := slices.Clone(scheduleMenu)
	for len(rest) < steps-1 {
		rest = append(rest, weighted())
	}
	sc.r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return append([]scheduleAction{{"produce", 0, (*schedule).produce}}, rest...)
}

func (sc *schedule) note(format string, args ...any) {
	sc.done = append(sc.done, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// produce sends a few records to each partition, each drawn: tenant, user,
// its own time (none, now, ahead, behind, far ahead) and its record's
// (now, ahead, none).
func (sc *schedule) produce() {
	sc.t.Helper()
	sc.produceEach(func(int) int { return 1 + sc.r.IntN(4) })
}

// produceEach produces n(p) events to each partition p, in one batch each.
func (sc *schedule) produceEach(n func(p int) int) {
	sc.t.Helper()
	now := time.Now()
	var made []string
	for p := range 3 {
		var recs []kafka.Record
		var evs []schedEvent
		for range n(p) {
			ev, rec := sc.draw(now)
			ev.partition, ev.sentAt, ev.incarnation = p, now, len(sc.topicIDs)-1
			evs, recs = append(evs, ev), append(recs, rec)
		}
		res, err := sc.produceBatch(p, recs)
		if err == nil && !stamped(res, evs) {
			made = append(made, fmt.Sprintf("%d records to partition %d refused, stamped past the topic's bound", len(evs), p))
			continue
		}
		if err == nil {
			err = res.Error
		}
		if err != nil {
			sc.t.Fatalf("produce to partition %d: %v", p, err)
		}
		for i := range evs {
			evs[i].offset, evs[i].seq = res.BaseOffset+int64(i), len(sc.events)+i
			made = append(made, evs[i].String())
		}
		sc.events = append(sc.events, evs...)
	}
	sc.note("produce %s", strings.Join(made, ", "))
}

// produceBatch produces recs to partition p of the input topic. A topic
// just created again has leaders in its metadata before its broker leads
// them: a refusal for that (nothing was appended) is tried again, with the
// records made anew. A record's key and value are readers a request
// drains: sent again as they were, they would be empty.
func (sc *schedule) produceBatch(p int, recs []kafka.Record) (*kafka.ProduceResponse, error) {
	keys, values := make([][]byte, len(recs)), make([][]byte, len(recs))
	for i, r := range recs {
		keys[i], values[i] = drain(sc.t, r.Key), drain(sc.t, r.Value)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		for i := range recs {
			recs[i].Key, recs[i].Value = kafka.NewBytes(keys[i]), kafka.NewBytes(values[i])
		}
		res, err := sc.client.Produce(context.Background(), &kafka.ProduceRequest{Topic: sc.s.topic, Partition: p,
			RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...)})
		leaderless := err == nil && (errors.Is(res.Error, kafka.NotLeaderForPartition) || errors.Is(res.Error, kafka.UnknownTopicOrPartition) ||
			errors.Is(res.Error, kafka.LeaderNotAvailable))
		if !leaderless || time.Now().After(deadline) {
			return res, err
		}
	}
}

// drain reads a record's key or value whole (nil for none).
func drain(t testing.TB, b kafka.Bytes) []byte {
	t.Helper()
	if b == nil {
		return nil
	}
	out, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// draw makes one event and its record.
func (sc *schedule) draw(now time.Time) (schedEvent, kafka.Record) {
	r := sc.r
	ev := schedEvent{id: fmt.Sprintf("e-%d", len(sc.events)+r.IntN(1<<30)), tenant: []string{"fast", "fast", "acme", "globex", "newco"}[r.IntN(5)],
		user: fmt.Sprintf("u-%d", r.IntN(3)), rec: now.UnixMilli()}
	if len(sc.favour) > 0 && r.IntN(2) == 0 {
		f := sc.favour[r.IntN(len(sc.favour))]
		ev.tenant, ev.user = f.tenant, f.user
	}
	if sc.only != "" {
		ev.tenant = sc.only
	}
	switch r.IntN(6) {
	case 0: // none: the record's time
	case 1:
		ev.own = now
	case 2:
		ev.own = now.Add(time.Duration(r.IntN(3600)) * time.Second)
	case 3:
		ev.own = now.Add(-time.Duration(r.IntN(7200)) * time.Second)
	case 4:
		ev.own = now.Add(time.Duration(1+r.IntN(2)) * time.Minute)
	default:
		ev.own = time.Date(2286, 11, 18, 0, 0, 0, 0, time.UTC)
	}
	switch r.IntN(5) {
	case 0, 1:
	case 2:
		ev.rec = now.Add(30*time.Second + time.Duration(r.IntN(3600))*time.Second).UnixMilli()
	case 3:
		ev.rec = now.Add(time.Hour).UnixMilli()
	default:
		ev.rec = -1 // Kafka's "no timestamp"
	}
	if sc.keepable {
		ev.tenant = []string{"acme", "globex"}[r.IntN(2)]
		ev.rec = now.Add(30*time.Second + time.Duration(r.IntN(3500))*time.Second).UnixMilli()
	}
	if limit := now.Add(59 * time.Minute).UnixMilli(); sc.withinHour && ev.rec > limit {
		ev.rec = limit
	}
	v := map[string]string{"event_id": ev.id, "tenant_id": ev.tenant, "user_id": ev.user}
	if !ev.own.IsZero() {
		v["occurred_at"] = ev.own.UTC().Format(time.RFC3339Nano)
	}
	value, _ := json.Marshal(v)
	rec := kafka.Record{Key: kafka.NewBytes([]byte(ev.user)), Value: kafka.NewBytes(value), Time: time.UnixMilli(ev.rec)}
	if r.IntN(4) == 0 {
		ev.forged = true
		rec.Headers = []kafka.Header{{Key: deadletter.HeaderSourceTimestamp, Value: []byte("2286-11-18T00:00:00Z")},
			{Key: deadletter.HeaderPlaced, Value: []byte("2286-11-18T00:00:00.000Z")}}
	}
	return ev, rec
}

func (e schedEvent) String() string {
	own := "-"
	if !e.own.IsZero() {
		own = e.own.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s %s/%s own %s rec %d @%d", e.id, e.tenant, e.user, own, e.rec, e.partition)
}

// forget erases a user of a tenant with events, every event or --before a
// time, and keeps what the receipt says.
func (sc *schedule) forget() { sc.forgetIn("") }

// forgetIn is forget, of a user of tenant ("": any).
func (sc *schedule) forgetIn(tenant string) {
	sc.t.Helper()
	events := sc.events
	if tenant != "" {
		events = slices.DeleteFunc(slices.Clone(events), func(e schedEvent) bool { return e.tenant != tenant })
	}
	if len(events) == 0 {
		return
	}
	// Mostly a user of the latest records, and of one stamped ahead: an
	// erasure matters most while their records wait in the topic, and
	// time alone does not cover a record stamped past erased_up_to.
	from := 0
	if sc.r.IntN(4) > 0 {
		from = max(0, len(events)-12)
	}
	pool := events[from:]
	if ahead := slices.DeleteFunc(slices.Clone(pool), func(e schedEvent) bool { return e.rec < e.sentAt.Add(30*time.Second).UnixMilli() }); len(ahead) > 0 && sc.r.IntN(2) == 0 {
		pool = ahead
	}
	sc.erase(pool[sc.r.IntN(len(pool))], true)
}

// erase runs worker forget for ev's user and keeps what the receipt says.
// drawn draws --before, --backup-retention and forget's clock; else the
// erasure is a whole one, without backups, on a true clock: the one whose
// record lives shortest.
func (sc *schedule) erase(ev schedEvent, drawn bool) {
	sc.t.Helper()
	args := append([]string{"forget"}, sc.flags()...)
	args = append(args, "--tenant", ev.tenant, "--user", ev.user, "--allow-empty", "--requested-by", "schedule", "--format", "json")
	var skew time.Duration
	if drawn {
		skew = sc.forgetSkew()
	}
	f := schedForget{tenant: ev.tenant, user: ev.user, acked: len(sc.events), incarnation: len(sc.topicIDs) - 1}
	before := drawn && sc.r.IntN(4) == 0
	if before {
		f.before = sc.beforeTime(ev, skew)
		args = append(args, "--before", f.before.UTC().Format(time.RFC3339))
	}
	if drawn && sc.r.IntN(4) == 0 {
		// Backups kept an hour, longer than any schedule: the record must
		// stay in force throughout, whatever a later forget retires.
		f.backups = time.Hour
		args = append(args, "--backup-retention", "1h")
	}
	cmd := exec.Command(forgetBinary(sc.t, sc.s.bin), args...)
	cmd.Env = append(os.Environ(), "TESTENV_CLOCK_SKEW="+skew.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if skew.Abs() > erasureClockTolerance+5*time.Second {
		// Past the tolerance forget refuses, and records nothing.
		if err == nil || !strings.Contains(stderr.String(), "refusing to record") {
			sc.t.Fatalf("forget %s/%s with its clock %s off: %v, want a refusal\n%s%s", ev.tenant, ev.user, skew, err, out, stderr.String())
		}
		sc.note("forget %s/%s refused, its clock %s off", ev.tenant, ev.user, skew)
		return
	}
	if err != nil {
		sc.t.Fatalf("forget %s/%s (its clock %s off): %v\n%s%s", ev.tenant, ev.user, skew, err, out, stderr.String())
	}
	var rc struct {
		ErasedUpTo time.Time `json:"erased_up_to"`
		Below      *struct {
			Ends []int64 `json:"end_offsets"`
		} `json:"erased_below"`
		Users []struct {
			Record *struct {
				Expires time.Time `json:"expires"`
			} `json:"ledger_record"`
		} `json:"users"`
	}
	if err := json.Unmarshal(out[:strings.IndexByte(string(out), '\n')], &rc); err != nil {
		sc.t.Fatalf("forget's receipt: %v\n%s", err, out)
	}
	f.upTo, f.returned = rc.ErasedUpTo, time.Now()
	if rc.Below != nil {
		f.ends = rc.Below.Ends
	}
	if len(rc.Users) > 0 && rc.Users[0].Record != nil {
		f.expires = rc.Users[0].Record.Expires
	}
	sc.forgets = append(sc.forgets, f)
	sc.note("forget %s/%s up to %s, mark %v, record expires %s (--before %t, --backup-retention %s, its clock %s off)", f.tenant, f.user, f.upTo.Format(time.RFC3339Nano), f.ends, f.expires.Format(time.RFC3339), before, f.backups, skew)
}

// beforeTime draws forget's --before for ev's user: half the time just
// past one of the user's events' times, so that it covers that event and
// those before it, not those after; else up to ten minutes back, before
// most of a schedule's events. Never past forget's clock, which refuses a
// time ahead. Drawn up to ten minutes back alone, a --before covered
// nothing in most schedules, which last minutes.
func (sc *schedule) beforeTime(ev schedEvent, skew time.Duration) time.Time {
	latest := time.Now().Add(min(0, skew))
	if sc.r.IntN(2) == 0 {
		var times []time.Time
		for _, e := range sc.events {
			if b, ok := e.base(); ok && e.tenant == ev.tenant && e.user == ev.user && b.Add(time.Second).Before(latest) {
				times = append(times, b)
			}
		}
		if len(times) > 0 {
			return times[sc.r.IntN(len(times))].Add(time.Second).Truncate(time.Second)
		}
	}
	return latest.Add(-time.Duration(sc.r.IntN(600)) * time.Second).Truncate(time.Second)
}

// retimeBesideForget edits fast's TTL (editTTL), then re-times fast's
// rows to it, a few rows a second, while a forget of one of fast's users
// runs beside it: a rewrite of a row retime read before the forget deleted
// it must not bring the row back.
//
// fast's rows live seconds: retime finds a few at most unless some were
// written just before. So fast's producers send a burst first, and the
// workers write it under the TTL before the edit: retime then reads rows
// for several seconds at its pace, and the forget lands among them.
//
// The hole shows when retime plans the erased user's rewrite before its
// ledger (refreshed every few seconds) holds the erasure, and applies it
// after forget's second pass: half the time the user erased is the one
// whose rows retime reaches first, else any user of fast.
func (sc *schedule) retimeBesideForget() {
	sc.t.Helper()
	burst := len(sc.events)
	sc.only = "fast"
	for range 3 {
		sc.produce()
	}
	sc.only = ""
	time.Sleep(time.Second) // the workers flush within --flush-interval
	sc.editTTL()
	cmd := exec.Command(sc.s.bin, "retime", "--tenant", "fast", "--tenants", sc.s.tenants, "--table", sc.s.table,
		"--rows-per-second", "2", "--passes", "1", "--log-format", "text")
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		sc.t.Fatalf("retime: %v", err)
	}
	time.Sleep(time.Duration(200+sc.r.IntN(1000)) * time.Millisecond)
	if first, ok := sc.firstRowsOf("fast", burst); ok && sc.r.IntN(2) == 0 {
		sc.erase(first, true)
	} else {
		sc.forgetIn("fast")
	}
	if err := cmd.Wait(); err != nil {
		sc.t.Fatalf("retime beside a forget: %v\n%s%s", err, out.String(), stderr.String())
	}
	sc.note("retime fast (%s): %s", sc.fastTTL, strings.Join(strings.Fields(out.String()), " "))
}

// firstRowsOf is the latest event of sc.events[since:] of the user of
// tenant whose rows sort first in the table: the rows a scan of the
// tenant reaches first.
func (sc *schedule) firstRowsOf(tenant string, since int) (ev schedEvent, ok bool) {
	var first string
	for _, e := range sc.events[since:] {
		if e.tenant != tenant {
			continue
		}
		if p := rowkey.UserPrefix(e.tenant, e.user); !ok || p <= first {
			ev, first, ok = e, p, true
		}
	}
	return ev, ok
}

// erasureClockTolerance is how far forget's clock may lie from
// Bigtable's before it refuses (erasure.ClockTolerance).
const erasureClockTolerance = time.Minute

// forgetSkew draws how far forget's host clock lies off: mostly not at
// all, often within the tolerance, ahead or behind, now and then past it.
// Zero when the worker binary is not the suite's own build (it cannot be
// moved there).
func (sc *schedule) forgetSkew() time.Duration {
	if os.Getenv("TESTENV_WORKER_BIN") != "" {
		return 0
	}
	switch n := sc.r.IntN(10); {
	case n < 5:
		return 0
	case n < 9:
		return time.Duration(sc.r.IntN(100)-50) * time.Second
	default:
		return time.Duration(1-2*sc.r.IntN(2)) * (erasureClockTolerance + time.Duration(10+sc.r.IntN(30))*time.Second)
	}
}

// workerSkewMax is the most a worker's clock lies off in a schedule.
const workerSkewMax = 10 * time.Second

// workerSkew is how far a worker's clock lies from the hosts' of Kafka and
// Bigtable: none half the time, else up to 10 s ahead or behind, what the
// workers are documented to need; none for another build
// (TESTENV_WORKER_BIN), whose clock cannot be moved.
func (sc *schedule) workerSkew() time.Duration {
	if os.Getenv("TESTENV_WORKER_BIN") != "" || sc.r.IntN(2) == 0 {
		return 0
	}
	return time.Duration(sc.r.Int64N(2*int64(workerSkewMax)+1)) - workerSkewMax
}

var (
	skewBuild    sync.Once
	skewBin      string
	skewBuildErr error
)

// forgetBinary is a build of the worker whose forget clock
// TESTENV_CLOCK_SKEW moves (the build tag skewclock), built once;
// bin itself when the suite runs another build (TESTENV_WORKER_BIN).
func forgetBinary(t *testing.T, bin string) string {
	t.Helper()
	if os.Getenv("TESTENV_WORKER_BIN") != "" {
		return bin
	}
	skewBuild.Do(func() {
		dir, err := testenv.ScratchDir("cellttl-worker-skewclock")
		if err != nil {
			skewBuildErr = err
			return
		}
		skewBin = filepath.Join(dir, "worker")
		if out, err := exec.Command("go", "build", "-tags", "skewclock", "-o", skewBin, "github.com/cellttl/cellttl/cmd/worker").CombinedOutput(); err != nil {
			skewBuildErr = fmt.Errorf("build the worker with its forget clock movable: %v\n%s", err, out)
		}
	})
	if skewBuildErr != nil {
		t.Fatal(skewBuildErr)
	}
	return skewBin
}

// wait lets time pass: records expire, the broker deletes segments, an
// erasure's record of the build before expires.
func (sc *schedule) wait() {
	d := time.Duration(5+sc.r.IntN(21)) * time.Second
	sc.note("wait %s", d)
	time.Sleep(d)
}

// replay reads the topic again with a new group, from its start.
func (sc *schedule) replay() {
	sc.t.Helper()
	group := testenv.Name("replay")
	w := sc.startWorker(group)
	sc.settle(group)
	sc.s.term(w)
	sc.note("replay by %s", group)
}

// restart stops the main worker, by SIGTERM or SIGKILL, and starts it again.
func (sc *schedule) restart() {
	sc.t.Helper()
	how := "SIGTERM"
	if sc.r.IntN(2) == 0 {
		how = "SIGKILL"
		sc.s.kill(sc.main)
	} else {
		sc.s.term(sc.main)
	}
	sc.main = sc.startWorker(sc.s.group)
	sc.note("restart (%s)", how)
}

// resetOffsets stops the group's workers, commits its offsets at each
// partition's log start, as an operator's kafka-consumer-groups.sh
// --reset-offsets --to-earliest does, and starts the main worker again.
// The broker takes such a commit only from an empty group: a member
// killed earlier stays in it until its session times out.
func (sc *schedule) resetOffsets() {
	sc.t.Helper()
	sc.s.term(sc.main)
	if sc.second != nil {
		sc.s.term(sc.second)
		sc.second = nil
	}
	starts := testenv.LogStarts(sc.t, sc.s.brokers, sc.s.topic, 3)
	commits := make([]kafka.OffsetCommit, 0, 3)
	for p, o := range starts {
		commits = append(commits, kafka.OffsetCommit{Partition: p, Offset: o})
	}
	testenv.Eventually(sc.t, 30*time.Second, func() (bool, string) {
		res, err := sc.client.OffsetCommit(context.Background(), &kafka.OffsetCommitRequest{GroupID: sc.s.group, GenerationID: -1,
			Topics: map[string][]kafka.OffsetCommit{sc.s.topic: commits}})
		if err == nil {
			for _, ps := range res.Topics {
				for _, p := range ps {
					if p.Error != nil {
						err = p.Error
					}
				}
			}
		}
		return err == nil, fmt.Sprintf("reset the group's offsets: %v", err)
	})
	sc.main = sc.startWorker(sc.s.group)
	sc.note("reset offsets to %v", starts)
}

// secondMember starts a second worker in the main group, or stops the one
// running, by SIGTERM or SIGKILL: partitions move between live members
// while events, erasures and replays are in flight, and a killed member's
// wait for its session to time out is part of the schedule.
func (sc *schedule) secondMember() {
	sc.t.Helper()
	if sc.second == nil {
		sc.second = sc.startWorker(sc.s.group)
		sc.note("a second member joins the main group")
		return
	}
	how := "SIGTERM"
	if sc.r.IntN(3) == 0 {
		how = "SIGKILL"
		sc.s.kill(sc.second)
	} else {
		sc.s.term(sc.second)
	}
	sc.second = nil
	sc.note("the second member leaves (%s)", how)
}

// ledgerOutage makes the ledger table refuse the workers' reads for a few
// seconds, as Bigtable answers in an outage (Unavailable), while events
// are produced and, now and then, a forget records beside it (forget
// reaches the table): what a worker cannot judge waits, and is decided
// once the ledger answers again.
//
// The main worker restarts first: started now, it holds the erasures kept
// forever past the first compact, and an event of one of their users
// waits for a lookup, which the outage fails. Half the events produced
// meanwhile are of users erased before.
func (sc *schedule) ledgerOutage() {
	sc.t.Helper()
	sc.restart()
	d := time.Duration(2+sc.r.IntN(6)) * time.Second
	until := time.Now().Add(d)
	// Unavailable, which the client retries until a lookup's deadline
	// (5 s), or Internal, which it does not: a lookup fails at once.
	code := []codes.Code{codes.Unavailable, codes.Internal}[sc.r.IntN(2)]
	sc.proxy.SetReadRowsFault(sc.s.table+"-erasures", status.Error(code, "schedule: the ledger table cannot answer"))
	sc.note("the ledger refuses the workers' reads for %s (%s)", d, code)
	sc.favour = sc.forgets
	sc.produce()
	sc.favour = nil
	if sc.r.IntN(2) == 0 {
		sc.forget()
	}
	time.Sleep(time.Until(until))
	sc.proxy.SetReadRowsFault("", nil)
	sc.note("the ledger answers again")
}

// redrive writes the letters again, signed ones alone.
func (sc *schedule) redrive() {
	sc.t.Helper()
	args := append([]string{"redrive"}, sc.flags()...)
	out, err := exec.Command(sc.s.bin, append(args, "--apply", "--dlq-signing-key-file", sc.keys)...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "not trusted") {
		sc.t.Fatalf("redrive: %v\n%s", err, out)
	}
	sc.note("redrive: %s", strings.Join(strings.Fields(string(out)), " "))
}

// list adds newco to the tenants file (an hour): its events are written
// from then, and a redrive writes its letters.
func (sc *schedule) list() {
	sc.t.Helper()
	if sc.listed {
		return
	}
	sc.listed = true
	sc.writeTenants()
	sc.note("list newco: 1h")
}

// editTTL lengthens fast's TTL to an hour, or shortens it back to 10 s,
// while its events, letters and erasures are in flight: an erasure's
// record must outlive what a lengthened TTL keeps, and a replay after it
// writes fast's events under the new TTL.
func (sc *schedule) editTTL() {
	sc.t.Helper()
	from := sc.fastTTL
	sc.fastTTL = time.Hour
	if from == time.Hour {
		sc.fastTTL = scheduleTTLs["fast"]
	}
	sc.fastTTLs[sc.fastTTL] = true
	sc.fastEdits = append(sc.fastEdits, ttlEdit{at: time.Now(), ttl: sc.fastTTL})
	sc.writeTenants()
	sc.note("edit fast's TTL: %s -> %s", from, sc.fastTTL)
}

// writeTenants writes the tenants file the schedule is at, and waits for
// the workers' reload.
func (sc *schedule) writeTenants() {
	sc.t.Helper()
	yaml := strings.Replace(scheduleTenants, "  fast: 10s\n", "  fast: "+duration.Format(sc.fastTTL)+"\n", 1)
	if sc.listed {
		yaml += "  newco: 1h\n"
	}
	if err := os.WriteFile(sc.s.tenants, []byte(yaml), 0o644); err != nil {
		sc.t.Fatal(err)
	}
	time.Sleep(time.Second) // the workers' reload
}

// settle waits until group has committed every partition to its end, or
// to where the broker's retention left it.
func (sc *schedule) settle(group string) {
	sc.t.Helper()
	testenv.Eventually(sc.t, 90*time.Second, func() (bool, string) {
		committed, end := testenv.Offsets(sc.t, sc.s.brokers, group, sc.s.topic, 3)
		starts := testenv.LogStarts(sc.t, sc.s.brokers, sc.s.topic, 3)
		for p, o := range end {
			if committed[p] < o && starts[p] < o {
				return false, fmt.Sprintf("group %s committed %v, end %v, log start %v", group, committed, end, starts)
			}
		}
		return true, ""
	})
}
