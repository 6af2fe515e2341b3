// Package verify checks what the worker wrote against what the load test
// produced: through the reader, that every valid event is in Bigtable
// exactly once, under the contract's row key, with the timestamp the
// tenants file gives and a single version of each cell; and in the
// dead-letter topic, that every invalid event is there and no valid one.
package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/reader"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/tenants"
)

// ErrMismatch is the error of a run the verification failed.
var ErrMismatch = errors.New("verification failed")

// Options is where the worker under test writes.
type Options struct {
	Brokers  []string
	DLQTopic string
	// Emulator is the embedded emulator, with --embedded; otherwise the
	// client finds BIGTABLE_EMULATOR_HOST, or Bigtable's Project and
	// Instance.
	Emulator          *inproc.Bigtable
	Project, Instance string
	Table, Family     string
}

// Result is the outcome of the verification.
type Result struct {
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
	// Latencies are the produce → ack times of the events found, from
	// their written_at cells, sorted.
	Latencies []time.Duration
}

// OK reports whether every event is where it should be, once.
func (c *Result) OK() bool {
	return len(c.missing)+len(c.duplicateRows)+len(c.wrongTimestamp)+len(c.wrongKey)+len(c.duplicateVersions)+len(c.missingDeadLetters)+len(c.unexpectedDeadLetters) == 0
}

// Summary is the verdict, each kind of defect counted, with examples.
func (c *Result) Summary() string {
	var b strings.Builder
	verdict := "PASS"
	if !c.OK() {
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

// Run reads back every event of the run: recs, made by g, of the tenants
// and timestamps cfg says.
func Run(ctx context.Context, o Options, cfg *tenants.Config, g *synth.Generator, recs []synth.Sent) (*Result, error) {
	c := &Result{}
	for _, r := range recs {
		if r.Valid {
			c.valid++
		} else {
			c.invalid++
		}
	}
	dc, err := o.client(ctx)
	if err != nil {
		return nil, err
	}
	defer dc.Close()
	// Rows per event, counted: a second row of one event is a duplicate,
	// and a set of events seen would hide it.
	v := &verifier{c: c, cfg: cfg, g: g, recs: recs, prefix: g.Run() + "-", rows: make([]int, len(recs)), tbl: dc.Open(o.Table), family: o.Family}
	rd := reader.New(v.tbl, o.Family, cfg.Policy)
	for ti := range g.Mix().Tenants() {
		tenant := g.Mix().TenantName(ti)
		err := rd.Read(ctx, reader.Query{Tenant: tenant}, func(ev reader.Event) bool { v.event(tenant, ev); return true })
		if err != nil {
			return nil, fmt.Errorf("read tenant %s: %w", tenant, err)
		}
		if err := v.versions(ctx, tenant); err != nil {
			return nil, fmt.Errorf("scan tenant %s: %w", tenant, err)
		}
	}
	for seq, r := range recs {
		if r.Valid && v.rows[seq] == 0 {
			c.missing = append(c.missing, seq)
		}
	}
	dead, err := deadLetterSeqs(ctx, o.Brokers, o.DLQTopic, g.Run())
	if err != nil {
		return nil, err
	}
	for seq, r := range recs {
		switch {
		case !r.Valid && dead[seq]:
			c.deadLettered++
		case !r.Valid:
			c.missingDeadLetters = append(c.missingDeadLetters, seq)
		case dead[seq]:
			c.unexpectedDeadLetters = append(c.unexpectedDeadLetters, seq)
		}
	}
	slices.Sort(c.Latencies)
	return c, nil
}

// verifier checks the rows of one run.
type verifier struct {
	c      *Result
	cfg    *tenants.Config
	g      *synth.Generator
	recs   []synth.Sent
	prefix string // of the run's event ids
	rows   []int  // rows found per event
	tbl    *bigtable.Table
	family string
}

// event checks one event a reader returned for tenant: its key, its
// timestamp, and that it is the first row of its event.
func (v *verifier) event(tenant string, ev reader.Event) {
	if !strings.HasPrefix(ev.EventID, v.prefix) {
		return
	}
	seq, err := strconv.Atoi(ev.EventID[len(v.prefix):])
	if err != nil || seq < 0 || seq >= len(v.recs) || !v.recs[seq].Valid {
		return
	}
	c, r, pol := v.c, v.recs[seq], v.cfg.Policy
	if v.rows[seq]++; v.rows[seq] == 1 {
		c.found++
	} else if v.rows[seq] == 2 {
		c.duplicateRows = append(c.duplicateRows, seq)
	}
	base := time.UnixMilli(r.Millis)
	if ev.Key != rowkey.Key(tenant, synth.UserName(r.User), ev.EventID, r.Millis) || ev.Tenant != v.g.Mix().TenantName(int(r.Tenant)) {
		c.wrongKey = append(c.wrongKey, seq)
	}
	cell := pol.Cell(tenant, base)
	if req, ok := v.g.Shape().RequestedTTL(ev.EventID); ok {
		// The event asked for its own TTL: within its tenant's bounds.
		ttl, _ := pol.EventTTL(tenant, req)
		cell = pol.CellTTL(ttl, base)
	}
	if ev.Timestamp != cell.Timestamp {
		c.wrongTimestamp = append(c.wrongTimestamp, seq)
	}
	if !ev.WrittenAt.IsZero() {
		c.Latencies = append(c.Latencies, ev.WrittenAt.Sub(base))
	}
}

// versions reads every version of every cell of tenant's rows, unfiltered:
// redelivery must not have added any.
func (v *verifier) versions(ctx context.Context, tenant string) error {
	return v.tbl.ReadRows(ctx, bigtable.PrefixRange(rowkey.TenantPrefix(tenant)), func(row bigtable.Row) bool {
		key := row.Key()
		id := key[strings.LastIndexByte(key, '#')+1:]
		if !strings.HasPrefix(id, v.prefix) {
			return true
		}
		perColumn := map[string]int{}
		for _, it := range row[v.family] {
			perColumn[it.Column]++
		}
		for _, n := range perColumn {
			if n > 1 {
				seq, _ := strconv.Atoi(id[len(v.prefix):])
				v.c.duplicateVersions = append(v.c.duplicateVersions, seq)
				break
			}
		}
		return true
	}, bigtable.RowFilter(bigtable.StripValueFilter()))
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
			headers := m.Headers
			if src, ok := sourceHeaders(ctx, brokers, m); ok {
				// A letter without payload: the run and sequence are the
				// source record's headers, in the input topic.
				headers = src
			}
			var gotRun bool
			seq := -1
			for _, h := range headers {
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

// sourceHeaders reads the headers of the record a letter without payload
// stands for, from the input topic (cellttl.source.*).
func sourceHeaders(ctx context.Context, brokers []string, m kafka.Message) ([]kafka.Header, bool) {
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	if h[deadletter.HeaderPayload] != "omitted" {
		return nil, false
	}
	part, perr := strconv.Atoi(h[deadletter.HeaderSourcePartition])
	off, oerr := strconv.ParseInt(h[deadletter.HeaderSourceOffset], 10, 64)
	if perr != nil || oerr != nil {
		return nil, false
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: h[deadletter.HeaderSourceTopic], Partition: part, MaxBytes: 10 << 20, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(off); err != nil {
		return nil, false
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	src, err := r.ReadMessage(rctx)
	if err != nil || src.Offset != off {
		return nil, false
	}
	return src.Headers, true
}

// client opens a data client of the table under test: of the embedded
// emulator, or as BIGTABLE_EMULATOR_HOST and the flags say.
func (o Options) client(ctx context.Context) (*bigtable.Client, error) {
	if o.Emulator != nil {
		dc, ac, err := o.Emulator.Clients(ctx)
		if err != nil {
			return nil, err
		}
		ac.Close()
		return dc, nil
	}
	dc, err := bigtable.NewClient(ctx, o.Project, o.Instance)
	if err != nil {
		return nil, fmt.Errorf("bigtable client: %w", err)
	}
	return dc, nil
}
