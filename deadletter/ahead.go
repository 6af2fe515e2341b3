package deadletter

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/segmentio/kafka-go"
)

// AheadMargin is how far past what its settings let a producer stamp now
// a record must lie for StampedAhead to call it stamped ahead: the
// worker's clock and the broker's may differ by that much.
const AheadMargin = time.Minute

// StampedAhead looks, in each topic of rs whose keep its settings bound,
// for a record stamped past what they let a producer stamp now (now +
// the ahead they allow + AheadMargin): one produced while they let more,
// before message.timestamp.type was set to LogAppendTime or
// message.timestamp.after.max.ms bounded. Kafka deletes a partition's
// segments oldest first, each once its newest record is older than
// retention.ms, so such a record keeps its segment and every later one as
// long as it says, whatever the settings say now. A topic that holds one,
// or whose partitions could not be searched, gets Ahead and keeps 0 (its
// letters keep no payload); the search asks the broker's time index
// (ListOffsets by timestamp) once per partition.
func StampedAhead(ctx context.Context, client *kafka.Client, rs []TopicRetention, now time.Time) {
	var search []string
	past := map[string]time.Time{} // by topic: a record stamped later is ahead
	for i := range rs {
		r := &rs[i]
		r.Ahead, r.aheadAt.offset = "", -1
		if r.Keeps = r.keeps(); r.Keeps > 0 && !r.Created {
			search = append(search, r.Topic) // not forever, unread or just created
			past[r.Topic] = now.Add(r.Stamping.SegmentAhead() + AheadMargin)
		}
	}
	if len(search) == 0 {
		return
	}
	res, err := searchAhead(ctx, client, search, past)
	for i := range rs {
		if slices.Contains(search, rs[i].Topic) {
			rs[i].noteAhead(ctx, client, res, err)
		}
	}
}

// searchAhead asks the broker's time index, of each partition of each
// topic of search, for the first record stamped past that topic's time.
// The partitions are read as they are now: a topic another worker has
// just created is not in the metadata its check began with. The client's
// transport may still list it without partitions: it has no record to
// search yet, and the next check searches it. Its partitions answer
// NOT_LEADER for a moment, as its settings do (see describe).
func searchAhead(ctx context.Context, client *kafka.Client, search []string, past map[string]time.Time) (res *kafka.ListOffsetsResponse, err error) {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(20*time.Millisecond), backoff.WithMaxElapsedTime(createdSettle))
	_ = backoff.Retry(func() error {
		res = nil
		md, merr := client.Metadata(ctx, &kafka.MetadataRequest{Topics: search})
		if err = merr; err != nil {
			return backoff.Permanent(err)
		}
		req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
		for _, t := range md.Topics {
			if t.Error == nil && slices.Contains(search, t.Name) {
				for _, p := range t.Partitions {
					req.Topics[t.Name] = append(req.Topics[t.Name], kafka.TimeOffsetOf(p.ID, past[t.Name]))
				}
			}
		}
		if len(req.Topics) == 0 {
			return nil
		}
		if res, err = client.ListOffsets(ctx, req); err != nil {
			return backoff.Permanent(err)
		}
		for _, ps := range res.Topics {
			for _, po := range ps {
				if kerr, ok := po.Error.(kafka.Error); ok && kerr.Temporary() {
					return kerr
				}
			}
		}
		return nil
	}, backoff.WithContext(b, ctx))
	return res, err
}

// noteAhead records in r what searchAhead found of it (err, the search's
// failure): where it holds a record stamped ahead, with that record's own
// stamp, or why it could not be searched; its keep follows.
func (r *TopicRetention) noteAhead(ctx context.Context, client *kafka.Client, res *kafka.ListOffsetsResponse, err error) {
	if err != nil {
		r.Ahead = fmt.Sprintf("its partitions could not be searched for a record stamped ahead: %v", err)
	}
	for _, po := range partitionsOf(res, r.Topic) {
		if po.Error != nil && r.Ahead == "" {
			r.Ahead = fmt.Sprintf("partition %d could not be searched for a record stamped ahead: %v", po.Partition, po.Error)
		}
		for off, past := range po.Offsets {
			if off >= 0 && r.aheadAt.offset < 0 {
				// The answer gives the offset of the first record stamped
				// past the time asked (kafka-go echoes that time): its own
				// stamp is in the record.
				r.aheadAt.partition, r.aheadAt.offset, r.aheadAt.at = po.Partition, off, past
			}
		}
	}
	if r.aheadAt.offset >= 0 {
		stamp := "past " + r.aheadAt.at.UTC().Format(time.RFC3339)
		if at, ok := recordTime(ctx, client, r.Topic, r.aheadAt.partition, r.aheadAt.offset); ok {
			r.aheadAt.at, stamp = at, at.UTC().Format(time.RFC3339)
		}
		r.Ahead = fmt.Sprintf("partition %d holds a record stamped %s (offset %d), past what its settings let a producer stamp now: it keeps its segment, and every later one, until then",
			r.aheadAt.partition, stamp, r.aheadAt.offset)
	}
	r.Keeps = r.keeps()
}

// recordTime reads the timestamp of the record at offset, false when it
// cannot (the broker deleted it meanwhile, or does not answer).
func recordTime(ctx context.Context, client *kafka.Client, topic string, partition int, offset int64) (time.Time, bool) {
	res, err := client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: partition, Offset: offset, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
	if err != nil || res.Error != nil || res.Records == nil {
		return time.Time{}, false
	}
	for {
		rec, err := res.Records.ReadRecord()
		if err != nil {
			return time.Time{}, false
		}
		if rec.Offset == offset {
			return rec.Time, true
		}
	}
}

// partitionsOf is res's partitions of topic; none of a nil answer.
func partitionsOf(res *kafka.ListOffsetsResponse, topic string) []kafka.PartitionOffsets {
	if res == nil {
		return nil
	}
	return res.Topics[topic]
}
