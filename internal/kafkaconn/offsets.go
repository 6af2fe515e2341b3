package kafkaconn

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// EndOffsets reads the end offset of each of topic's partitions, by
// partition id: the offset the next record appended to it will get. A
// topic that does not exist, or a partition whose offset cannot be read,
// is an error: a caller that counts on every record below the ends must
// not take "none" for "no record".
func EndOffsets(ctx context.Context, brokers []string, security Security, topic string) ([]int64, error) {
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
			reqs = append(reqs, kafka.LastOffsetOf(p.ID))
		}
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("topic %s: not found", topic)
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	ends := make([]int64, len(reqs))
	seen := 0
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("end offset of %s/%d: %w", topic, p.Partition, p.Error)
		}
		if p.Partition < 0 || p.Partition >= len(ends) {
			return nil, fmt.Errorf("end offsets of %s: partition %d of %d", topic, p.Partition, len(ends))
		}
		ends[p.Partition] = p.LastOffset
		seen++
	}
	if seen != len(ends) {
		return nil, fmt.Errorf("end offsets of %s: %d of %d partitions answered", topic, seen, len(ends))
	}
	return ends, nil
}
