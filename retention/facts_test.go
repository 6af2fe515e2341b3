package retention

import (
	"testing"
	"time"

	"github.com/cellttl/cellttl/tablemeta"
)

// The input topic holds events written under an earlier --ttl-from for as
// long as it keeps them: the statement counts a setting replaced within
// the topic's keep, not only the one in force.
func TestOwnTTLsWithinTheInputTopicsKeep(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	rec := tablemeta.Record{TTLFrom: []tablemeta.Setting{
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
