package faults

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// The topics of a schedule, as an operator may set them: each stamps its
// records as its settings say, drawn at the start and changed by restamp,
// and a producer with the right to may forge a letter stamped ahead.

// stamping is how a topic stamps its records.
type stamping int

const (
	// anyAhead: CreateTime, a producer's stamp any time ahead (Kafka 3's
	// default).
	anyAhead stamping = iota
	// hourAhead: CreateTime, a producer's stamp up to an hour ahead
	// (Kafka 4's default); the broker refuses a batch stamped further.
	hourAhead
	// brokerStamps: LogAppendTime, the broker's clock, with an
	// after.max.ms that Kafka does not apply under it (the worker must not
	// take it for a bound).
	brokerStamps
)

var stampingNames = []string{"CreateTime, any time ahead", "CreateTime, up to an hour ahead", "LogAppendTime"}

func (st stamping) String() string { return stampingNames[st] }

// configs are a topic's settings under st, with its retention.
func (st stamping) configs(retention, segment time.Duration) map[string]string {
	c := map[string]string{"retention.ms": fmt.Sprint(retention.Milliseconds()), "segment.ms": fmt.Sprint(segment.Milliseconds()),
		"message.timestamp.type": "CreateTime"}
	switch st {
	case anyAhead:
		c["message.timestamp.after.max.ms"] = "9223372036854775807"
	case hourAhead:
		c["message.timestamp.after.max.ms"] = "3600000"
	case brokerStamps:
		c["message.timestamp.type"], c["message.timestamp.after.max.ms"] = "LogAppendTime", "300000"
	}
	return c
}

// The schedule's topics keep records for seconds: the broker deletes
// segments while a schedule runs.
const (
	inputRetention, inputSegment = 20 * time.Second, 2 * time.Second
	dlqRetention, dlqSegment     = 10 * time.Second, 2 * time.Second
)

// forgedLetter is a record a schedule produced to the dead-letter topic,
// stamped ahead by its producer: its partition keeps it, and every later
// record, until its stamp is past the topic's retention.
type forgedLetter struct {
	partition int
	offset    int64
	stamp     time.Time
}

// restamp sets the input topic (two times in three) or the dead-letter
// topic to another stamping, as an operator may: records stamped ahead
// before stay, and hold their partitions as long as they say, whatever
// the topic allows now. What was placed so far is observed under the
// settings it was placed by. The stamping is one the topic has not had in
// the schedule while there is one: a schedule drawn under CreateTime then
// reaches LogAppendTime in one restamp of two.
func (sc *schedule) restamp() {
	sc.t.Helper()
	input := sc.r.IntN(3) > 0
	topic, from := sc.s.topic, sc.inputStamping
	if !input {
		topic, from = sc.s.dlq, sc.dlqStamping
	}
	var next []stamping
	for n := range stamping(len(stampingNames)) {
		if n != from && !sc.stamped[topic][n] {
			next = append(next, n)
		}
	}
	if len(next) == 0 {
		next = []stamping{(from + 1) % stamping(len(stampingNames)), (from + 2) % stamping(len(stampingNames))}
	}
	sc.setStamping(input, next[sc.r.IntN(len(next))])
}

// setStamping sets the input topic (input) or the dead-letter topic to
// stamp as to, and waits for the workers' next check of its settings.
func (sc *schedule) setStamping(input bool, to stamping) {
	sc.t.Helper()
	topic, st, retention, segment := sc.s.topic, &sc.inputStamping, inputRetention, inputSegment
	if !input {
		topic, st, retention, segment = sc.s.dlq, &sc.dlqStamping, dlqRetention, dlqSegment
	}
	from := *st
	*st = to
	sc.stamped[topic][to] = true
	sc.observe()
	testenv.AlterTopic(sc.t, sc.s.brokers, topic, to.configs(retention, segment))
	// The workers' next check: what they do before it follows the
	// settings before, as docs/retention.md says.
	time.Sleep(2 * scheduleTopicCheck)
	sc.note("restamp %s: %s -> %s", topic, from, to)
}

// forgeLetter produces a record to the dead-letter topic stamped ahead, as
// a producer with the right to write there may: ten years, or within the
// hour Kafka 4 allows by default. The broker refuses it where the topic
// bounds stamps, and stamps it itself under LogAppendTime.
func (sc *schedule) forgeLetter() {
	sc.t.Helper()
	stamp := time.Now().AddDate(10, 0, 0)
	if sc.r.IntN(2) == 0 {
		stamp = time.Now().Add(time.Duration(20+sc.r.IntN(30)) * time.Minute)
	}
	stamp = stamp.Truncate(time.Millisecond)
	res, err := sc.client.Produce(context.Background(), &kafka.ProduceRequest{Topic: sc.s.dlq, Partition: 0, RequiredAcks: kafka.RequireAll,
		Records: kafka.NewRecordReader(kafka.Record{Value: kafka.NewBytes([]byte("a forged letter")), Time: stamp})})
	if err == nil {
		err = res.Error
	}
	switch {
	case errors.Is(err, kafka.InvalidTimestamp):
		sc.note("forge a letter stamped %s: refused by the topic (%s)", stamp.UTC().Format(time.RFC3339), sc.dlqStamping)
		return
	case err != nil:
		sc.t.Fatalf("forge a letter: %v", err)
	}
	f := forgedLetter{offset: res.BaseOffset, stamp: stamp}
	if !res.LogAppendTime.IsZero() {
		f.stamp = res.LogAppendTime // the broker's clock, not the producer's
	}
	sc.forged = append(sc.forged, f)
	sc.note("forge a letter at offset %d, stamped %s", f.offset, f.stamp.UTC().Format(time.RFC3339Nano))
}

// isForged reports whether the letter at partition, offset is one the
// schedule forged.
func (sc *schedule) isForged(partition int, offset int64) bool {
	for _, f := range sc.forged {
		if f.partition == partition && f.offset == offset {
			return true
		}
	}
	return false
}

// letterLife is how long the broker may keep a letter at partition,
// offset placed at placed, under keep (retention.ms + segment.ms + the
// retention check): from its placement, unless a forged letter below it
// in its partition holds the partition longer (from that one's stamp).
func (sc *schedule) letterLife(partition int, offset int64, placed time.Time, keep time.Duration) time.Time {
	end := placed.Add(keep)
	for _, f := range sc.forged {
		if f.partition == partition && f.offset < offset && f.stamp.Add(keep).After(end) {
			end = f.stamp.Add(keep)
		}
	}
	return end
}

// stamped takes what the broker said of a batch produced to the input
// topic: under LogAppendTime its own time is every record's, as the
// worker must read it. It reports false when the broker refused the batch
// for a stamp past the topic's bound (no record of it was appended).
func stamped(res *kafka.ProduceResponse, evs []schedEvent) bool {
	if errors.Is(res.Error, kafka.InvalidTimestamp) {
		return false
	}
	if !res.LogAppendTime.IsZero() {
		for i := range evs {
			evs[i].rec = res.LogAppendTime.UnixMilli()
		}
	}
	return true
}

// recreateTopic deletes the input topic and creates it again under its
// name, with the settings it had, as an operator may: the new incarnation
// counts its offsets from 0 again, below the workers' positions and the
// marks of the erasures so far. Records of the old one that no worker
// read are gone with it. What was placed so far is observed first.
//
// The producers go on at once, until each partition of the new
// incarnation holds as many records as the old one did: its offsets then
// pass the workers' positions, the moment a worker that fetched on from
// its position would skip the new incarnation's first records.
func (sc *schedule) recreateTopic() {
	sc.t.Helper()
	sc.recreate(false)
}

// pauseAcrossRecreate freezes the group's workers (SIGSTOP, a frozen
// host) past a fetch's longest wait, so that the broker has answered
// their fetches in flight before the topic goes, then recreates the topic
// and refills it as recreateTopic does, and lets them go on well within
// their sessions: nothing a worker reads then says the topic changed. Its
// next fetch lands inside the new log, at its old position.
func (sc *schedule) pauseAcrossRecreate() {
	sc.t.Helper()
	sc.recreate(true)
}

func (sc *schedule) recreate(pause bool) {
	sc.t.Helper()
	sc.observe()
	frozen := []*worker{sc.main}
	if sc.second != nil {
		frozen = append(frozen, sc.second)
	}
	if pause {
		for _, w := range frozen {
			w.Signal(syscall.SIGSTOP)
		}
		sc.note("SIGSTOP the group's %d workers", len(frozen))
		time.Sleep(time.Second)
		// The refill is of long-lived tenants, stamped ahead: the broker
		// keeps it, and the check below holds each event to promise 4
		// before any replay could write what the group skipped.
		sc.keepable = true
		defer func() {
			sc.keepable = false
			for _, w := range frozen {
				w.Signal(syscall.SIGCONT)
			}
			sc.note("SIGCONT")
			sc.settle(sc.s.group)
			sc.nothingLost()
		}()
	}
	was := sc.topicIDs[len(sc.topicIDs)-1]
	_, old := testenv.Offsets(sc.t, sc.s.brokers, sc.s.group, sc.s.topic, 3)
	testenv.RecreateTopic(sc.t, sc.s.brokers, sc.s.topic, 3, sc.inputStamping.configs(inputRetention, inputSegment))
	sc.topicIDs = append(sc.topicIDs, sc.topicID(was))
	sc.note("recreate %s: %s -> %s, which held %v", sc.s.topic, was, sc.topicIDs[len(sc.topicIDs)-1], old)
	// At once as many records as the old incarnation held, before the
	// workers' next lookup: a worker that took the new topic for the old
	// one would read on from its old position, past them all.
	sc.withinHour = true
	sc.produceEach(func(p int) int { return int(min(max(old[p], 1), 200)) })
	sc.withinHour = false
	for range 20 {
		_, end := testenv.Offsets(sc.t, sc.s.brokers, sc.s.group, sc.s.topic, 3)
		if end[0] >= old[0] && end[1] >= old[1] && end[2] >= old[2] {
			break
		}
		sc.produce()
	}
}

// topicID waits until the input topic has an id other than was, and
// every partition a leader, and returns the id.
func (sc *schedule) topicID(was string) string {
	sc.t.Helper()
	var id string
	testenv.Eventually(sc.t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		if id, err = kafkaconn.TopicID(ctx, sc.s.brokers, kafkaconn.Security{}, sc.s.topic); err != nil || id == "" || id == was {
			return false, fmt.Sprintf("the id of %s (was %q): %q, %v", sc.s.topic, was, id, err)
		}
		md, err := sc.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{sc.s.topic}})
		if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 3 {
			return false, fmt.Sprintf("the partitions of %s: %v", sc.s.topic, err)
		}
		for _, p := range md.Topics[0].Partitions {
			if p.Error != nil || p.Leader.ID < 0 {
				return false, fmt.Sprintf("partition %d of %s has no leader yet: %v", p.ID, sc.s.topic, p.Error)
			}
		}
		return true, ""
	})
	return id
}
