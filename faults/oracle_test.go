package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/testenv"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/tenants"
)

// verdict is what the oracle found, and the figures of the run.
type verdict struct {
	Scenario          string `json:"scenario"`
	Produced          int    `json:"produced"`
	Poison            int    `json:"poison"`
	Faults            int    `json:"faults"`
	Lost              int    `json:"lost"`
	DuplicateVersions int    `json:"duplicate_versions"`
	WrongTimestamps   int    `json:"wrong_timestamps"`
	Misrouted         int    `json:"misrouted"`   // in the wrong place: a valid event dead-lettered, an expired one written...
	Uncommitted       int    `json:"uncommitted"` // settled events the final commit does not cover
	MaxLag            int64  `json:"max_lag"`
	Recovery          string `json:"recovery"`
	Notes             string `json:"notes,omitempty"`
	problems          []string
}

func (v *verdict) problem(format string, args ...any) {
	if len(v.problems) < 20 {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

type rowInfo struct {
	key      string
	versions map[string]int
	ts       int64
}

// check runs the oracle over everything the suite produced: every valid
// event in Bigtable exactly once, one version per column, the contract's
// timestamp; every invalid one in the dead-letter topic with a reason;
// expired ones nowhere; and the group's commits covering all of it.
func (s *suite) check(name string, partitions int, recovery time.Duration, notes string) verdict {
	s.t.Helper()
	ctx := context.Background()
	cfg, err := tenants.Load(s.tenants)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	events := append([]produced(nil), s.events...)
	v := verdict{Scenario: name, Produced: len(events), Faults: s.faults, MaxLag: s.maxLag, Recovery: recovery.Round(100 * time.Millisecond).String(), Notes: notes}
	s.mu.Unlock()
	end := time.Now()
	s.logf("oracle: reading the topic")

	// Where each event landed in the topic, and what the group committed.
	where := map[int][2]int64{}
	for _, m := range readTopic(s.t, s.brokers, s.topic) {
		seq, _ := strconv.Atoi(header(m, "seq"))
		where[seq] = [2]int64{int64(m.Partition), m.Offset}
	}
	committed, _ := testenv.Offsets(s.t, s.brokers, s.group, s.topic, partitions)

	s.logf("oracle: reading the table")
	rows := map[string]*rowInfo{}
	err = s.dc.Open(s.table).ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		key := r.Key()
		ri := &rowInfo{key: key, versions: map[string]int{}}
		for _, it := range r["c"] {
			ri.versions[it.Column]++
			ri.ts = int64(it.Timestamp)
		}
		rows[key[strings.LastIndexByte(key, '#')+1:]] = ri
		return true
	}, bigtable.RowFilter(bigtable.StripValueFilter()))
	if err != nil {
		s.t.Fatalf("read table: %v", err)
	}
	s.logf("oracle: reading the dead-letter topic")
	dead := map[int]string{}
	for _, m := range readTopic(s.t, s.brokers, s.topic+".dlq") {
		seq, _ := strconv.Atoi(header(m, "seq"))
		dead[seq] = header(m, ingest.HeaderReason)
	}

	s.logf("oracle: checking")
	for seq, ev := range events {
		id := "f-" + strconv.Itoa(seq)
		row, inTable := rows[id]
		reason, inDLQ := dead[seq]
		if ev.kind == invalid {
			v.Poison++
		}
		switch ev.kind {
		case valid, clamped:
			if !inTable {
				v.Lost++
				v.problem("seq %d (%s) not in Bigtable", seq, ev.tenant)
				break
			}
			if row.versions["c:event"] != 1 || row.versions["c:written_at"] != 1 {
				v.DuplicateVersions++
				v.problem("seq %d: versions %v", seq, row.versions)
			}
			if ev.kind == valid {
				if want := cfg.Policy.Cell(ev.tenant, time.UnixMilli(ev.millis)).Timestamp; row.ts != want {
					v.WrongTimestamps++
					v.problem("seq %d: timestamp %d, want %d", seq, row.ts, want)
				}
				if row.key != rowkey.Key(ev.tenant, ev.user, id, ev.millis) {
					v.Misrouted++
					v.problem("seq %d: key %s", seq, row.key)
				}
			} else {
				lo, hi := cfg.Policy.Cell(ev.tenant, ev.sentAt.Add(-time.Millisecond)).Timestamp, cfg.Policy.Cell(ev.tenant, end).Timestamp
				if row.ts < lo || row.ts > hi {
					v.WrongTimestamps++
					v.problem("seq %d (clamped): timestamp %d outside [%d, %d]", seq, row.ts, lo, hi)
				}
			}
			if inDLQ {
				v.Misrouted++
				v.problem("seq %d valid but dead-lettered: %s", seq, reason)
			}
		case invalid:
			if !inDLQ {
				v.Lost++
				v.problem("seq %d (poison) not in the dead-letter topic", seq)
			} else if reason == "" {
				v.Misrouted++
				v.problem("seq %d dead-lettered without a reason", seq)
			}
			if inTable {
				v.Misrouted++
				v.problem("seq %d (poison) written to Bigtable", seq)
			}
		case expired:
			if inTable || inDLQ {
				v.Misrouted++
				v.problem("seq %d (expired) written or dead-lettered", seq)
			}
		}
		if w, ok := where[seq]; !ok {
			v.Lost++
			v.problem("seq %d not found in the topic", seq)
		} else if w[1] >= committed[int(w[0])] {
			v.Uncommitted++
			v.problem("seq %d at %d/%d beyond the committed offset %d", seq, w[0], w[1], committed[int(w[0])])
		}
	}
	s.t.Logf("%s: produced %d (poison %d), faults %d, lost %d, duplicate versions %d, wrong timestamps %d, misrouted %d, uncommitted %d, max lag %d, recovery %s",
		name, v.Produced, v.Poison, v.Faults, v.Lost, v.DuplicateVersions, v.WrongTimestamps, v.Misrouted, v.Uncommitted, v.MaxLag, v.Recovery)
	for _, p := range v.problems {
		s.t.Error(p)
	}
	s.mu.Lock()
	s.t.Logf("timeline:\n%s", s.log.String())
	s.mu.Unlock()
	if dir := os.Getenv("CELLTTL_FAULTS_OUT"); dir != "" {
		data, _ := json.MarshalIndent(v, "", "  ")
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, name+".json"), data, 0o644)
	}
	return v
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// readTopic reads every partition of topic to its end.
func readTopic(t interface{ Fatalf(string, ...any) }, brokers []string, topic string) []kafka.Message {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	var out []kafka.Message
	for _, p := range parts {
		pc, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
		if err != nil {
			t.Fatalf("leader of %s/%d: %v", topic, p.ID, err)
		}
		first, last, err := pc.ReadOffsets()
		pc.Close()
		if err != nil {
			t.Fatalf("offsets of %s/%d: %v", topic, p.ID, err)
		}
		if last <= first {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxBytes: 10 << 20, MaxWait: 200 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			t.Fatalf("%v", err)
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read %s/%d: %v", topic, p.ID, err)
			}
			out = append(out, m)
			if m.Offset+1 >= last {
				break
			}
		}
		r.Close()
	}
	return out
}
