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

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// verdict is what the oracle found, and the figures of the run.
type verdict struct {
	Scenario          string `json:"scenario"`
	Produced          int    `json:"produced"`
	Poison            int    `json:"poison"`
	Faults            int    `json:"faults"`
	Lost              int    `json:"lost"`
	DuplicateRows     int    `json:"duplicate_rows"`     // valid events in more than one row
	DuplicateVersions int    `json:"duplicate_versions"` // cells with more than one version
	WrongTimestamps   int    `json:"wrong_timestamps"`
	Misrouted         int    `json:"misrouted"`   // in the wrong place: a valid event dead-lettered, an expired one written...
	Uncommitted       int    `json:"uncommitted"` // settled events the final commit does not cover
	Truncated         int    `json:"truncated"`   // dead letters cut to fit, each with the original size and SHA-256
	MaxLag            int64  `json:"max_lag"`
	PeakRSSMiB        int64  `json:"peak_rss_mib,omitempty"`
	BoundMiB          int64  `json:"bound_mib,omitempty"` // --max-inflight-bytes
	Recovery          string `json:"recovery"`
	Notes             string `json:"notes,omitempty"`
	problems          []string
}

func (v *verdict) problem(format string, args ...any) {
	if len(v.problems) < 20 {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

// clean reports whether the oracle found nothing wrong.
func (v *verdict) clean() bool {
	return v.Lost+v.DuplicateRows+v.DuplicateVersions+v.WrongTimestamps+v.Misrouted+v.Uncommitted == 0
}

// rowInfo is one row of the table: an event's cells, every version.
type rowInfo struct {
	key      string
	versions map[string]int // per column
	ts       int64
}

// observed is what the run left behind, read back from Kafka and Bigtable.
type observed struct {
	// where each produced event landed in the topic, and its record time
	where     map[int]kafka.Message
	committed map[int]int64
	rows      map[string][]*rowInfo // by event id: every row, so that a second one shows
	dead      map[int]kafka.Message // dead letters by seq (a redelivered one may be there twice: harmless)
}

// observe reads the topic, the group's commits, the table and the
// dead-letter topic.
func (s *suite) observe(partitions int) observed {
	s.t.Helper()
	o := observed{where: map[int]kafka.Message{}, rows: map[string][]*rowInfo{}, dead: map[int]kafka.Message{}}
	if !s.unreadTopic {
		s.logf("oracle: reading the topic")
		for _, m := range testenv.ReadToEnd(s.t, s.brokers, s.topic) {
			seq, _ := strconv.Atoi(header(m, "seq"))
			m.Value = nil // the oracle needs where and when, not the bytes
			o.where[seq] = m
		}
	}
	o.committed, _ = testenv.Offsets(s.t, s.brokers, s.group, s.topic, partitions)
	s.logf("oracle: reading the table")
	err := s.dc.Open(s.table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		key := r.Key()
		ri := &rowInfo{key: key, versions: map[string]int{}}
		for _, it := range r["c"] {
			ri.versions[it.Column]++
			ri.ts = int64(it.Timestamp)
		}
		id := key[strings.LastIndexByte(key, '#')+1:]
		o.rows[id] = append(o.rows[id], ri)
		return true
	}, bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("^c$"), bigtable.StripValueFilter()))) // events only, not the workers' record
	if err != nil {
		s.t.Fatalf("read table: %v", err)
	}
	s.logf("oracle: reading the dead-letter topic")
	// A letter without its payload keeps neither the record's headers nor
	// its key, only where the record was: it is found by that.
	bySource := map[[2]int64]int{}
	for seq, m := range o.where {
		bySource[[2]int64{int64(m.Partition), m.Offset}] = seq
	}
	for _, m := range testenv.ReadToEnd(s.t, s.brokers, s.dlq) {
		seq, err := strconv.Atoi(header(m, "seq"))
		if err != nil {
			part, perr := strconv.ParseInt(header(m, deadletter.HeaderSourcePartition), 10, 32)
			off, oerr := strconv.ParseInt(header(m, deadletter.HeaderSourceOffset), 10, 64)
			found := false
			if perr == nil && oerr == nil && header(m, deadletter.HeaderSourceTopic) == s.topic {
				seq, found = bySource[[2]int64{part, off}]
			}
			if !found {
				continue // not a produced event's (a batch that could not be decoded)
			}
		}
		o.dead[seq] = m
	}
	return o
}

// check runs the oracle over everything the suite produced and fails the
// test on what it finds (see judge).
func (s *suite) check(name string, partitions int, recovery time.Duration, notes string) verdict {
	s.t.Helper()
	v := s.judge(s.observe(partitions))
	v.Scenario, v.Recovery, v.Notes = name, recovery.Round(100*time.Millisecond).String(), notes
	s.mu.Lock()
	v.Faults, v.MaxLag = s.faults, s.maxLag
	s.mu.Unlock()
	s.t.Logf("%s: produced %d (poison %d), faults %d, lost %d, duplicate rows %d, duplicate versions %d, wrong timestamps %d, misrouted %d, uncommitted %d, truncated %d, max lag %d, recovery %s",
		name, v.Produced, v.Poison, v.Faults, v.Lost, v.DuplicateRows, v.DuplicateVersions, v.WrongTimestamps, v.Misrouted, v.Uncommitted, v.Truncated, v.MaxLag, v.Recovery)
	for _, p := range v.problems {
		s.t.Error(p)
	}
	s.mu.Lock()
	s.t.Logf("timeline:\n%s", s.log.String())
	s.mu.Unlock()
	s.record(v)
	return v
}

// record keeps a scenario's verdict for RELIABILITY.md.
func (s *suite) record(v verdict) {
	if dir := os.Getenv("TESTENV_FAULTS_OUT"); dir != "" {
		data, _ := json.MarshalIndent(v, "", "  ")
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, v.Scenario+".json"), data, 0o644)
	}
}

// judge holds what the run left behind against what was produced: every
// valid event in Bigtable in exactly one row (counted per event id), one
// version per cell, the contract's row key and timestamp (for a clamped
// occurred_at, exactly the record timestamp's); every invalid one in the
// dead-letter topic with a reason (a dead letter cut to fit with its
// original size and SHA-256); expired ones nowhere; and the group's commits
// covering all of it. When the run changed tenants.yaml, a timestamp may
// follow any of the files it went through, and no other.
func (s *suite) judge(o observed) verdict {
	s.mu.Lock()
	events := append([]produced(nil), s.events...)
	configs := append([]*tenants.Config(nil), s.configs...)
	s.mu.Unlock()
	v := verdict{Produced: len(events)}
	s.logf("oracle: checking")
	for seq, ev := range events {
		id := "f-" + strconv.Itoa(seq)
		rows := o.rows[id]
		dl, inDLQ := o.dead[seq]
		msg, inTopic := o.where[seq]
		if ev.kind == invalid {
			v.Poison++
		}
		switch ev.kind {
		case valid, clamped:
			if len(rows) == 0 {
				v.Lost++
				v.problem("seq %d (%s) not in Bigtable", seq, ev.tenant)
				break
			}
			if len(rows) > 1 {
				v.DuplicateRows++
				keys := make([]string, len(rows))
				for i, r := range rows {
					keys[i] = r.key
				}
				v.problem("seq %d in %d rows: %v", seq, len(rows), keys)
			}
			row := rows[0]
			if row.versions["c:event"] != 1 || row.versions["c:written_at"] != 1 {
				v.DuplicateVersions++
				v.problem("seq %d: versions %v", seq, row.versions)
			}
			base := time.UnixMilli(ev.millis)
			if ev.kind == clamped || ev.fromRecord {
				if !inTopic {
					break
				}
				base = msg.Time // the record timestamp is the reference clock
			}
			if !oneOf(configs, func(c *tenants.Config) bool { return row.ts == c.Policy.Cell(ev.tenant, base).Timestamp }) {
				v.WrongTimestamps++
				v.problem("seq %d (%s, %s): timestamp %d, want %d (or that of another file the run went through)", seq, ev.tenant, ev.kind, row.ts, configs[0].Policy.Cell(ev.tenant, base).Timestamp)
			}
			if row.key != rowkey.Key(ev.tenant, ev.user, id, base.UnixMilli()) {
				v.Misrouted++
				v.problem("seq %d: key %s", seq, row.key)
			}
			if inDLQ {
				v.Misrouted++
				v.problem("seq %d valid but dead-lettered: %s", seq, header(dl, deadletter.HeaderReason))
			}
		case invalid:
			switch {
			case !inDLQ:
				v.Lost++
				v.problem("seq %d (poison) not in the dead-letter topic", seq)
			case header(dl, deadletter.HeaderReason) == "":
				v.Misrouted++
				v.problem("seq %d dead-lettered without a reason", seq)
			case header(dl, deadletter.HeaderTruncated) == "true":
				v.Truncated++
				sum := ev.sha256
				if header(dl, deadletter.HeaderPayload) == "omitted" {
					sum = "" // no plain digest of a value a letter does not keep
				}
				if header(dl, deadletter.HeaderOriginalSize) != strconv.Itoa(ev.size) || header(dl, deadletter.HeaderOriginalSHA256) != sum {
					v.Misrouted++
					v.problem("seq %d: truncated dead letter says size %s sha256 %q, want %d %q", seq,
						header(dl, deadletter.HeaderOriginalSize), header(dl, deadletter.HeaderOriginalSHA256), ev.size, sum)
				}
			}
			if len(rows) > 0 {
				v.Misrouted++
				v.problem("seq %d (poison) written to Bigtable", seq)
			}
		case expired:
			if len(rows) > 0 || inDLQ {
				v.Misrouted++
				v.problem("seq %d (expired) written or dead-lettered", seq)
			}
		}
		if s.unreadTopic {
			continue
		}
		if !inTopic {
			v.Lost++
			v.problem("seq %d not found in the topic", seq)
		} else if msg.Offset >= o.committed[msg.Partition] {
			v.Uncommitted++
			v.problem("seq %d at %d/%d beyond the committed offset %d", seq, msg.Partition, msg.Offset, o.committed[msg.Partition])
		}
	}
	return v
}

func oneOf(configs []*tenants.Config, ok func(*tenants.Config) bool) bool {
	for _, c := range configs {
		if ok(c) {
			return true
		}
	}
	return false
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
