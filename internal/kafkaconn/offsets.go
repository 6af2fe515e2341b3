package kafkaconn

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// Topic names a topic on a cluster, for the reads of its offsets.
type Topic struct {
	Brokers  []string
	Security Security
	Name     string
}

// EndOffsets reads the topic's end offsets (see EndOffsets), with its name.
func (t Topic) EndOffsets(ctx context.Context) (string, []int64, error) {
	ends, err := EndOffsets(ctx, t.Brokers, t.Security, t.Name)
	return t.Name, ends, err
}

// LogStarts reads the log start offsets of topic, on t's cluster (see
// LogStartOffsets), and its id (see TopicID).
func (t Topic) LogStarts(ctx context.Context, topic string) ([]int64, string, error) {
	starts, err := LogStartOffsets(ctx, t.Brokers, t.Security, topic)
	if err != nil {
		return nil, "", err
	}
	id, err := TopicID(ctx, t.Brokers, t.Security, topic)
	return starts, id, err
}

// ID reads topic's id, on t's cluster (see TopicID).
func (t Topic) ID(ctx context.Context, topic string) (string, error) {
	return TopicID(ctx, t.Brokers, t.Security, topic)
}

// EndOffsets reads the end offset of each of topic's partitions, by
// partition id: the offset the next record appended to it will get. A
// topic that does not exist, or a partition whose offset cannot be read,
// is an error: a caller that counts on every record below the ends must
// not take "none" for "no record".
func EndOffsets(ctx context.Context, brokers []string, security Security, topic string) ([]int64, error) {
	return offsets(ctx, brokers, security, topic, kafka.LastOffset)
}

// LogStartOffsets reads the log start offset of each of topic's
// partitions, by partition id: where the broker's retention (or a
// DeleteRecords) has left it, every record below it gone. The same
// errors as EndOffsets: a caller that counts on records being gone must
// not take "unread" for "gone".
func LogStartOffsets(ctx context.Context, brokers []string, security Security, topic string) ([]int64, error) {
	return offsets(ctx, brokers, security, topic, kafka.FirstOffset)
}

// offsets reads one offset of each of topic's partitions: which is
// kafka.FirstOffset or kafka.LastOffset.
func offsets(ctx context.Context, brokers []string, security Security, topic string, which int64) ([]int64, error) {
	what := map[int64]string{kafka.FirstOffset: "log start offset", kafka.LastOffset: "end offset"}[which]
	client, done, err := security.AdminClient(brokers, []string{topic})
	if err != nil {
		return nil, err
	}
	defer done()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	var reqs []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafka.OffsetRequest{Partition: p.ID, Timestamp: which})
		}
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("topic %s: not found", topic)
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("%ss of %s: %w", what, topic, err)
	}
	out := make([]int64, len(reqs))
	seen := 0
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("%s of %s/%d: %w", what, topic, p.Partition, p.Error)
		}
		if p.Partition < 0 || p.Partition >= len(out) {
			return nil, fmt.Errorf("%ss of %s: partition %d of %d", what, topic, p.Partition, len(out))
		}
		out[p.Partition] = p.LastOffset
		if which == kafka.FirstOffset {
			out[p.Partition] = p.FirstOffset
		}
		seen++
	}
	if seen != len(out) {
		return nil, fmt.Errorf("%ss of %s: %d of %d partitions answered", what, topic, seen, len(out))
	}
	return out, nil
}
