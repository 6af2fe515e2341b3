package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/reader"
	"github.com/cellttl/cellttl/schema"
	"github.com/cellttl/cellttl/schema/registry"
	"github.com/cellttl/cellttl/sink"
)

// readCmd is worker read: a tenant's live events, read as a correct reader
// reads them.
type readCmd struct {
	tableOptions
	query                reader.Query
	since, until, format string
	// registry decodes the stored values when they were produced framed
	// for a schema registry: the flags of worker run.
	registry registry.Config
	wait     waitfor.Config
}

func newReadCmd() *readCmd {
	return &readCmd{tableOptions: defaultTableOptions(), registry: registry.DefaultConfig()}
}

func (o *readCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker read", "worker read: a tenant's live events, with their expiry, read with the filter that hides expired cells.\n"+
		"Exit status: 0 done, 1 an error, 2 bad flags or file, 5 Bigtable or the schema registry did not answer within --service-timeout.", out)
	o.register(f)
	f.Section("Read")
	f.String(&o.query.Tenant, "tenant", "READ_TENANT", "", "tenant to read (required)")
	f.String(&o.query.User, "user", "READ_USER", "", "only this user's events (one key range)")
	f.String(&o.since, "since", "READ_SINCE", "", "event time from: RFC 3339, or a duration ago such as 1h or 2d")
	f.String(&o.until, "until", "READ_UNTIL", "", "event time before: RFC 3339, or a duration ago")
	f.Int(&o.query.Limit, "limit", "READ_LIMIT", 100, "at most this many events (0: all)")
	f.Bool(&o.query.IncludeExpired, "include-expired", "", false, "also show cells GC has not collected yet, marked expired (debugging; a flag only: no environment variable)")
	f.String(&o.format, "format", "READ_FORMAT", "text", "output: text or json (one object per line)")
	o.registry.RegisterFlags(f)
	o.wait.RegisterFlags(f, readWait)
	return f
}

// run checks the GC rule the read filter relies on, and prints the events.
func (o *readCmd) run(ctx context.Context, stdout, _ io.Writer) error {
	q, since, until, format := o.query, o.since, o.until, o.format
	if q.Tenant == "" {
		return usageError(errors.New("--tenant is required"))
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	if err := o.registry.Validate(); err != nil {
		return usageError(err)
	}
	now := time.Now()
	var err error
	if q.Since, err = parseWhen("--since", since, now); err != nil {
		return usageError(err)
	}
	if q.Until, err = parseWhen("--until", until, now); err != nil {
		return usageError(err)
	}
	s, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	// The filter is only right for the GC rule the file describes.
	if err := sink.CheckGC(ctx, s.ac, o.table.Target(), s.cfg.Policy.GCMaxAge()); err != nil {
		return fmt.Errorf("refusing to read: %w (the tenants file says %s)", err, describePolicy(s.cfg.Policy))
	}
	r := reader.New(btwait.Open(s.dc, o.table.Table), o.table.Family, s.cfg.Policy)
	if o.registry.ValueFormat() != schema.JSON {
		// The registry's own log speaks of the worker's dead letters; here
		// each value that cannot be decoded says why in the output.
		schemas, err := registry.New(o.registry, nil, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			return usageError(err)
		}
		defer schemas.Close()
		r.DecodeValues(schemas)
	}
	out := newEventPrinter(stdout, format, now)
	if err := r.Read(ctx, q, out.print); err != nil {
		return err
	}
	return out.flush()
}

type eventPrinter struct {
	format string
	now    time.Time
	tw     *tabwriter.Writer
	enc    *json.Encoder
	n      int
}

func newEventPrinter(w io.Writer, format string, now time.Time) *eventPrinter {
	p := &eventPrinter{format: format, now: now}
	if format == "json" {
		p.enc = json.NewEncoder(w)
	} else {
		p.tw = tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
		fmt.Fprintln(p.tw, "EVENT TIME\tUSER\tEVENT ID\tEXPIRES\tTTL\tWRITTEN AT\tVALUE")
	}
	return p
}

type jsonEvent struct {
	Key       string     `json:"key"`
	Tenant    string     `json:"tenant"`
	User      string     `json:"user,omitempty"`
	EventID   string     `json:"event_id"`
	EventTime time.Time  `json:"event_time"`
	Timestamp int64      `json:"timestamp_micros"`
	Expiry    time.Time  `json:"expiry"`
	Expired   bool       `json:"expired"`
	WrittenAt *time.Time `json:"written_at,omitempty"`
	// TTL is how long the event lives, TTLSource "event" (it gave its own,
	// RequestedTTL) or "tenant".
	TTL          string          `json:"ttl"`
	TTLSource    string          `json:"ttl_source"`
	RequestedTTL string          `json:"requested_ttl,omitempty"`
	Value        json.RawMessage `json:"value,omitempty"`
	RawValue     string          `json:"raw_value,omitempty"`
	// Decoding through the registry: a value that cannot be decoded is
	// given whole in base64, with why.
	ValueBase64 string `json:"value_base64,omitempty"`
	ValueError  string `json:"value_error,omitempty"`
}

func (p *eventPrinter) print(ev reader.Event) bool {
	p.n++
	if p.enc != nil {
		je := jsonEvent{Key: ev.Key, Tenant: ev.Tenant, User: ev.User, EventID: ev.EventID, EventTime: ev.EventTime,
			Timestamp: ev.Timestamp, Expiry: ev.Expiry, Expired: ev.Expired, TTL: duration.Format(ev.TTL), TTLSource: ev.TTLSource}
		if ev.TTLSource == reader.TTLFromEvent {
			je.RequestedTTL = formatRequested(ev.RequestedTTL)
		}
		if !ev.WrittenAt.IsZero() {
			je.WrittenAt = &ev.WrittenAt
		}
		switch {
		case ev.Decoded != nil:
			je.Value = ev.Decoded
		case ev.DecodeError != nil:
			je.ValueBase64, je.ValueError = base64.StdEncoding.EncodeToString(ev.Value), notDecoded(ev.DecodeError)
		case json.Valid(ev.Value):
			je.Value = ev.Value
		default:
			je.RawValue = string(ev.Value)
		}
		return p.enc.Encode(je) == nil
	}
	expires := ev.Expiry.Format(time.RFC3339Nano) + " (in " + duration.Format(ev.Expiry.Sub(p.now).Truncate(time.Second)) + ")"
	if ev.Expired {
		expires = ev.Expiry.Format(time.RFC3339Nano) + " (EXPIRED " + duration.Format(p.now.Sub(ev.Expiry).Truncate(time.Second)) + " ago)"
	}
	written := "-"
	if !ev.WrittenAt.IsZero() {
		written = ev.WrittenAt.Format(time.RFC3339Nano)
	}
	fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ev.EventTime.Format(time.RFC3339Nano), orDash(ev.User), ev.EventID, expires, ttlText(ev), written, valueText(ev))
	return true
}

// valueText is the VALUE column: the value decoded through the registry,
// or when it cannot be, its bytes in base64 and why; without the registry,
// the value as stored.
func valueText(ev reader.Event) string {
	switch {
	case ev.Decoded != nil:
		return string(ev.Decoded)
	case ev.DecodeError != nil:
		return "base64:" + base64.StdEncoding.EncodeToString(ev.Value) + " (not decoded: " + notDecoded(ev.DecodeError) + ")"
	}
	return strings.TrimSpace(string(ev.Value))
}

// notDecoded says why a value is not decoded: its class, as a dead
// letter's reason class names it, and the reason.
func notDecoded(e *event.Error) string { return string(e.Class) + ": " + e.Reason }

// ttlText is an event's TTL and where it came from: "1h (tenant)", "30m
// (event)", "3h (event asked 30d)" when its tenant's bounds clamped it.
func ttlText(ev reader.Event) string {
	t := duration.Format(ev.TTL) + " (" + ev.TTLSource
	if ev.TTLSource == reader.TTLFromEvent && ev.RequestedTTL != ev.TTL {
		t += " asked " + formatRequested(ev.RequestedTTL)
	}
	return t + ")"
}

// formatRequested writes a requested TTL, which may be absurdly long.
func formatRequested(d time.Duration) string {
	if d >= event.MaxRequestedTTL {
		return "more than 292 years"
	}
	return duration.Format(d)
}

func (p *eventPrinter) flush() error {
	if p.tw != nil {
		if p.n == 0 {
			fmt.Fprintln(p.tw, "(no live events)")
		}
		return p.tw.Flush()
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
