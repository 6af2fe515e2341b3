package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/reader"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/tenants"
)

// check is the outcome of the verification.
type check struct {
	valid, invalid        int
	found                 int
	missing               []int // seqs of valid events not in Bigtable
	duplicateRows         []int // seqs of valid events in more than one row
	wrongTimestamp        []int
	wrongKey              []int
	duplicateVersions     []int
	deadLettered          int
	missingDeadLetters    []int
	unexpectedDeadLetters []int // valid events found in the dead-letter topic
	latencies             []time.Duration
}

func (c *check) ok() bool {
	return len(c.missing)+len(c.duplicateRows)+len(c.wrongTimestamp)+len(c.wrongKey)+len(c.duplicateVersions)+len(c.missingDeadLetters)+len(c.unexpectedDeadLetters) == 0
}

func (c *check) summary() string {
	var b strings.Builder
	verdict := "PASS"
	if !c.ok() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "verification %s: %d valid events, %d in Bigtable; %d invalid, %d in the dead-letter topic\n", verdict, c.valid, c.found, c.invalid, c.deadLettered)
	for _, l := range []struct {
		name string
		seqs []int
	}{{"missing from Bigtable", c.missing}, {"in more than one row", c.duplicateRows}, {"wrong timestamp", c.wrongTimestamp}, {"wrong row key", c.wrongKey},
		{"more than one version", c.duplicateVersions}, {"missing from the dead-letter topic", c.missingDeadLetters},
		{"valid but dead-lettered", c.unexpectedDeadLetters}} {
		fmt.Fprintf(&b, "  %-36s %d%s\n", l.name, len(l.seqs), examples(l.seqs))
	}
	return b.String()
}

func examples(seqs []int) string {
	if len(seqs) == 0 {
		return ""
	}
	n := min(len(seqs), 5)
	parts := make([]string, n)
	for i := range n {
		parts[i] = strconv.Itoa(seqs[i])
	}
	return " (e.g. seq " + strings.Join(parts, ", ") + ")"
}

// verify reads back every event of the run.
func verify(ctx context.Context, o *options, brokers []string, cfg *tenants.Config, g *generator, recs []record) (*check, error) {
	c := &check{}
	for _, r := range recs {
		if r.valid {
			c.valid++
		} else {
			c.invalid++
		}
	}
	dc, err := o.bigtableClient(ctx)
	if err != nil {
		return nil, err
	}
	defer dc.Close()
	tbl := dc.Open(o.table)
	rd := reader.New(tbl, o.family, cfg.Policy)
	prefix := g.run + "-"
	// Rows per event, counted: a second row of one event is a duplicate,
	// and a set of events seen would hide it.
	rows := make([]int, len(recs))
	for ti := range g.mix.tenants {
		tenant := g.mix.tenantName(ti)
		err := rd.Read(ctx, reader.Query{Tenant: tenant}, func(ev reader.Event) bool {
			if !strings.HasPrefix(ev.EventID, prefix) {
				return true
			}
			seq, err := strconv.Atoi(ev.EventID[len(prefix):])
			if err != nil || seq < 0 || seq >= len(recs) || !recs[seq].valid {
				return true
			}
			r := recs[seq]
			if rows[seq]++; rows[seq] == 1 {
				c.found++
			} else if rows[seq] == 2 {
				c.duplicateRows = append(c.duplicateRows, seq)
			}
			base := time.UnixMilli(r.millis)
			if ev.Key != rowkey.Key(tenant, userName(r.user), ev.EventID, r.millis) || ev.Tenant != g.mix.tenantName(int(r.tenant)) {
				c.wrongKey = append(c.wrongKey, seq)
			}
			if ev.Timestamp != cfg.Policy.Cell(tenant, base).Timestamp {
				c.wrongTimestamp = append(c.wrongTimestamp, seq)
			}
			if !ev.WrittenAt.IsZero() {
				c.latencies = append(c.latencies, ev.WrittenAt.Sub(base))
			}
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("read tenant %s: %w", tenant, err)
		}
		// Every version of every cell, unfiltered: redelivery must not have
		// added any.
		err = tbl.ReadRows(ctx, bigtable.PrefixRange(rowkey.TenantPrefix(tenant)), func(row bigtable.Row) bool {
			key := row.Key()
			id := key[strings.LastIndexByte(key, '#')+1:]
			if !strings.HasPrefix(id, prefix) {
				return true
			}
			perColumn := map[string]int{}
			for _, it := range row[o.family] {
				perColumn[it.Column]++
			}
			for _, n := range perColumn {
				if n > 1 {
					seq, _ := strconv.Atoi(id[len(prefix):])
					c.duplicateVersions = append(c.duplicateVersions, seq)
					break
				}
			}
			return true
		}, bigtable.RowFilter(bigtable.StripValueFilter()))
		if err != nil {
			return nil, fmt.Errorf("scan tenant %s: %w", tenant, err)
		}
	}
	for seq, r := range recs {
		if r.valid && rows[seq] == 0 {
			c.missing = append(c.missing, seq)
		}
	}
	dead, err := deadLetterSeqs(ctx, brokers, o.dlqTopic, g.run)
	if err != nil {
		return nil, err
	}
	for seq, r := range recs {
		switch {
		case !r.valid && dead[seq]:
			c.deadLettered++
		case !r.valid:
			c.missingDeadLetters = append(c.missingDeadLetters, seq)
		case dead[seq]:
			c.unexpectedDeadLetters = append(c.unexpectedDeadLetters, seq)
		}
	}
	sortDurations(c.latencies)
	return c, nil
}

// deadLetterSeqs reads the dead-letter topic to its end and returns the
// sequence numbers of the run's messages found there.
func deadLetterSeqs(ctx context.Context, brokers []string, topic, run string) (map[int]bool, error) {
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return nil, fmt.Errorf("dial kafka: %w", err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	out := map[int]bool{}
	for _, p := range parts {
		pc, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
		if err != nil {
			return nil, fmt.Errorf("dial %s/%d: %w", topic, p.ID, err)
		}
		first, last, err := pc.ReadOffsets()
		pc.Close()
		if err != nil {
			return nil, err
		}
		if last <= first {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxBytes: 10 << 20, MaxWait: 200 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			r.Close()
			return nil, err
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				return nil, fmt.Errorf("read %s/%d: %w", topic, p.ID, err)
			}
			var gotRun bool
			seq := -1
			for _, h := range m.Headers {
				switch h.Key {
				case "loadtest-run":
					gotRun = string(h.Value) == run
				case "loadtest-seq":
					seq, _ = strconv.Atoi(string(h.Value))
				}
			}
			if gotRun && seq >= 0 {
				out[seq] = true
			}
			if m.Offset+1 >= last {
				break
			}
		}
		r.Close()
	}
	return out, nil
}

// bigtableClient opens a data client of the table under test: of the
// embedded emulator, or as BIGTABLE_EMULATOR_HOST and the flags say.
func (o *options) bigtableClient(ctx context.Context) (*bigtable.Client, error) {
	if o.emulator != nil {
		dc, ac, err := o.emulator.Clients(ctx)
		if err != nil {
			return nil, err
		}
		ac.Close()
		return dc, nil
	}
	dc, err := bigtable.NewClient(ctx, o.project, o.instance)
	if err != nil {
		return nil, fmt.Errorf("bigtable client: %w", err)
	}
	return dc, nil
}
