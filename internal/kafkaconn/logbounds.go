package kafkaconn

import (
	"context"
	"errors"

	"github.com/segmentio/kafka-go"
)

// Bounds are a partition's log bounds: its first offset, its end (the
// high watermark) and its last stable offset, -1 when not read.
type Bounds struct{ First, HW, LSO int64 }

// LogBounds reads the end and the last stable offset of the log of each
// partition of ids in topic, and its first offset when first is set, in
// calls that kafka-go splits by leader over client's connections. A
// partition whose last stable offset could not be read has it -1 when
// readCommitted is not set; when it is (where to start and the lag both
// need it), it is one of errs, as is a partition the broker answered
// with an error.
func LogBounds(ctx context.Context, client *kafka.Client, topic string, ids []int, first, readCommitted bool) (map[int]Bounds, map[int]error, error) {
	var reqs []kafka.OffsetRequest
	for _, id := range ids {
		if first {
			reqs = append(reqs, kafka.FirstOffsetOf(id))
		}
		reqs = append(reqs, kafka.LastOffsetOf(id))
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, nil, err
	}
	stable := lastStableOf(ctx, client, topic, ids)
	out, errs := map[int]Bounds{}, map[int]error{}
	for _, po := range res.Topics[topic] {
		lso, ok := stable[po.Partition]
		if !ok {
			lso = -1
		}
		switch {
		case po.Error != nil:
			errs[po.Partition] = po.Error
		case !ok && readCommitted:
			errs[po.Partition] = errors.New("last stable offset not read")
		default:
			out[po.Partition] = Bounds{First: po.FirstOffset, HW: po.LastOffset, LSO: lso}
		}
	}
	return out, errs, nil
}

// lastStableOf reads the last stable offset of each partition of ids: the
// end a read_committed consumer reads to. Partitions whose offset could
// not be read are missing.
func lastStableOf(ctx context.Context, client *kafka.Client, topic string, ids []int) map[int]int64 {
	reqs := make([]kafka.OffsetRequest, len(ids))
	for i, id := range ids {
		reqs[i] = kafka.LastOffsetOf(id)
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs},
		IsolationLevel: kafka.ReadCommitted})
	if err != nil {
		return nil
	}
	out := map[int]int64{}
	for _, po := range res.Topics[topic] {
		if po.Error == nil && po.LastOffset >= 0 {
			out[po.Partition] = po.LastOffset
		}
	}
	return out
}
