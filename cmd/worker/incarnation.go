package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/kafkaconn"
)

// followIncarnation tells w which incarnation of the input topic this
// command reads (its Kafka topic id): an erasure's mark of another covers
// every record of it. Unread (the topic not there yet, a broker before
// Kafka 2.8), marks cover by offsets alone, and the log says so. It
// returns the id, "" when unread.
func followIncarnation(ctx context.Context, k kafkaconn.Connection, w *erasure.Watch, log *slog.Logger) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := kafkaconn.TopicID(ctx, k.Brokers, k.Security, k.Topic)
	if err != nil || id == "" {
		log.Warn("the input topic's id is unknown: erasures cover its records by offset alone, as if it were never created again", "topic", k.Topic, "err", err)
		return ""
	}
	w.SetTopicID(k.Topic, id)
	return id
}

// followTopicID reads the input topic's id again every
// --dlq-check-interval until ctx ends, for a worker that runs for months:
// a topic deleted and created again under it takes a new id, and the
// worker would hold the new topic's records to the old one's marks, and
// its letters would name the old one. A change is logged, and the ledger
// and the dead-letter writer take the new id. What was read before the
// change was seen is held to the old id, which errs on the erasure's
// side: a mark of the new topic covers all of it.
func (w *worker) followTopicID(ctx context.Context) {
	k := w.o.kafka
	kafkaconn.FollowTopicID(ctx, w.o.dlq.CheckInterval, k.Brokers, k.Security, k.Topic, w.topicID, func(was, now string) {
		w.log.Warn("the input topic was created again: its records are held to the new incarnation's marks from now on", "topic", k.Topic, "was", was, "now", now)
		w.erasures.SetTopicID(k.Topic, now)
		w.dlq.SetSourceID(k.Topic, now)
	})
}
