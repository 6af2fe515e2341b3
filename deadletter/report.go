package deadletter

import (
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
)

// LogTopics says, topic by topic, how long a dead letter's payload can stay
// there, and which tenants' letters (ttls, by tenant) no topic can keep with
// their payload: a worker says it once it has checked its topics.
func LogTopics(rs []TopicRetention, ttls map[string]time.Duration, log *slog.Logger) {
	shortest := time.Duration(0)
	for _, r := range rs {
		if r.Problem != nil {
			continue
		}
		log.Info("dead-letter topic ready", "topic", r.Topic, "created", r.Created, "retention", duration.Format(r.Retention), "segment", duration.Format(r.Segment),
			"cleanup_policy", r.Policy, "keeps_up_to", duration.Format(r.Keeps), "max_message_bytes", r.MaxMessageBytes, "writable", r.Writable,
			"partitions", r.Partitions, "replicas", r.Replicas)
		if r.Keeps > 0 && (shortest == 0 || r.Keeps < shortest) {
			shortest = r.Keeps
		}
	}
	var short []string
	for id, ttl := range ttls {
		if shortest == 0 || ttl < shortest {
			short = append(short, id+" "+duration.Format(ttl))
		}
	}
	if len(short) > 0 {
		slices.Sort(short)
		log.Warn("dead letters of these tenants keep no payload (their TTL ends before any dead-letter topic deletes them); add a shorter class with --dlq-classes to keep it",
			"tenants", strings.Join(short[:min(len(short), 20)], ", "), "count", len(short), "shortest_keep", duration.Format(shortest))
	}
}
