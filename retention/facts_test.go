package retention

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// The input topic holds events written under an earlier --ttl-from for as
// long as it keeps them: the statement counts a setting replaced within
// the topic's keep, not only the one in force.
func TestOwnTTLsWithinTheInputTopicsKeep(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	rec := tablemeta.State{TTLFrom: []tablemeta.Setting{
		{TTLFrom: "json:ttl", Since: now.AddDate(0, 0, -10)},
		{TTLFrom: "", Since: now.AddDate(0, 0, -2)},
	}}
	for _, c := range []struct {
		input TopicKeep
		want  bool
	}{
		{TopicKeep{Keeps: 7 * 24 * time.Hour}, true}, // replaced 2 days ago, the topic keeps 7
		{TopicKeep{Keeps: 24 * time.Hour}, false},    // the topic's records all came after
		{TopicKeep{Keeps: Forever}, true},            // forever
		{TopicKeep{Unknown: "denied"}, true},         // unread: the whole record
		{TopicKeep{Missing: true}, true},             // no topic read: the whole record
	} {
		if set, got := ownTTLsWithin(rec, c.input, now); got != c.want || (got && set.TTLFrom != "json:ttl") {
			t.Errorf("input %+v: %q, %t; want %t", c.input, set.TTLFrom, got, c.want)
		}
	}
	rec.TTLFrom = append(rec.TTLFrom, tablemeta.Setting{TTLFrom: "header:x-ttl", Since: now.Add(-time.Hour)})
	if set, ok := ownTTLsWithin(rec, TopicKeep{Keeps: time.Minute}, now); !ok || set.TTLFrom != "header:x-ttl" {
		t.Errorf("the setting in force: %q, %t", set.TTLFrom, ok)
	}
}

// Gather reads the facts off the live system: the family's GC rule, the
// input topic's keep, every dead-letter topic the broker has (a class the
// flags no longer name among them), the --ttl-from the workers recorded
// when the command has none, and the ledger's name.
func TestGatherReadsTheLiveSystem(t *testing.T) {
	testenv.BrokerVersionMatters(t, "topic settings, some of which Kafka 4 removed")
	brokers := testenv.Kafka(t)
	dc, ac := testenv.Clients(t)
	cfg, err := tenants.Parse([]byte("default_ttl: 2d\ntenants:\n  acme:\n    ttl: 1h\n    min_ttl: 10m\n"))
	if err != nil {
		t.Fatal(err)
	}
	table := sink.TableConfig{Table: testenv.Name("facts"), Family: "c"}
	if _, err := sink.Setup(ctx, ac, dc, table.Target(), cfg.Policy.GCMaxAge(), sink.SetupOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tablemeta.Setup(ctx, ac, table.Table, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.DeleteTable(context.Background(), table.Table) })
	store := tablemeta.NewStore(dc, table.Table)
	if _, _, err := store.ClaimTTLFrom(ctx, tablemeta.Claim{TTLFrom: "json:ttl", By: "worker run", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	topic := testenv.Name("clicks")
	testenv.CreateTopicWith(t, brokers, topic, 1, map[string]string{"retention.ms": "600000", "segment.ms": "60000", "message.timestamp.type": "LogAppendTime"})
	testenv.CreateTopicWith(t, brokers, topic+".dlq", 1, testenv.DeadLetterConfigs)
	testenv.CreateTopicWith(t, brokers, topic+".dlq.1h", 1, map[string]string{"retention.ms": "3600000"})
	f, err := Gather(ctx, Sources{Config: cfg, Table: table, Admin: ac, Data: dc, Brokers: brokers, Topic: topic,
		DeadLetters: deadletter.Names{}, MaxClockSkew: 5 * time.Minute}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !f.FamilyHasMaxAge || f.FamilyMaxAge != cfg.Policy.GCMaxAge() || f.Table != table.Target().String() || f.Ledger != table.ErasureTable() {
		t.Errorf("the table's facts: %+v", f)
	}
	if f.Input.Topic != topic || f.Input.Keeps < 11*time.Minute || f.Input.Unknown != "" {
		t.Errorf("the input topic keeps 10m + a 1m segment + the broker's check: %+v", f.Input)
	}
	var dlqs []string
	for _, d := range f.DeadLetters {
		dlqs = append(dlqs, d.Topic)
	}
	if !slices.Contains(dlqs, topic+".dlq") || !slices.Contains(dlqs, topic+".dlq.1h") {
		t.Errorf("dead-letter topics %v: want the base and the class the broker still has", dlqs)
	}
	if !f.OwnTTLs || !strings.Contains(f.OwnTTLsRecorded, "json:ttl") || f.UnlistedBound != cfg.Policy.DefaultTTL {
		t.Errorf("own TTLs from the table's record %q (%t), unlisted bound %s", f.OwnTTLsRecorded, f.OwnTTLs, f.UnlistedBound)
	}
}

// An input topic whose producers may stamp records any time ahead keeps
// them forever, in Kafka's eyes: a record stamped a year ahead holds its
// segment, and every later one, a year past its retention.ms. Its line
// says so and names the settings that bound it.
func TestTopicKeepCountsRecordsStampedAhead(t *testing.T) {
	r := deadletter.TopicRetention{Topic: "clicks", Policy: "delete", Retention: time.Hour, Segment: time.Minute, RetentionCheck: time.Minute,
		Stamping: kafkaconn.Stamping{Type: "CreateTime", AheadMax: -1, Setting: "message.timestamp.after.max.ms"}}
	k := topicKeep(r)
	if k.Keeps != Forever || !strings.Contains(k.Settings, "message.timestamp.after.max.ms unbounded") || !strings.Contains(k.Settings, "bound it: message.timestamp.after.max.ms") {
		t.Errorf("unbounded stamps: %+v", k)
	}
	r.Stamping.AheadMax, r.Keeps = time.Hour, 2*time.Hour+2*time.Minute
	if k := topicKeep(r); k.Keeps != r.Keeps || !strings.Contains(k.Settings, "records stamped up to 1h ahead (message.timestamp.after.max.ms)") {
		t.Errorf("stamps within an hour: %+v", k)
	}
}
