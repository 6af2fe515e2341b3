package reader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// stubValues decodes "ok-N" into {"n":N}, refuses "bad" as the value's
// fault and "down" as its own.
type stubValues struct{ asked []string }

func (s *stubValues) DecodeValue(_ context.Context, v []byte) (json.RawMessage, error) {
	s.asked = append(s.asked, string(v))
	switch n, ok := strings.CutPrefix(string(v), "ok-"); {
	case ok:
		return json.RawMessage(`{"n":` + n + `}`), nil
	case string(v) == "bad":
		return nil, &event.Error{Class: event.Undecodable, Reason: "the value does not decode"}
	}
	return nil, errors.New("the registry cannot be reached")
}

// A Reader given a ValueDecoder decodes the values of the events it
// returns: a value the decoder refuses (an *event.Error) comes back as
// stored, with why; the decoder failing otherwise ends the read, naming
// the row. Without one, values are as stored.
func TestDecodeValues(t *testing.T) {
	dc, ac := testenv.Clients(t)
	p := &expiry.Policy{Strategy: expiry.DefaultExpiration, DefaultTTL: 48 * time.Hour}
	tgt := sink.Target(testenv.Table(t, ac, dc, p.GCMaxAge()))
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var rows []sink.Row
	for i, v := range []string{"ok-1", "bad", "ok-2", "down"} {
		rows = append(rows, sink.Row{Key: string(rowkey.Build(nil, "acme", "alice", fmt.Sprintf("e-%d", i), at.UnixMilli())), Timestamp: p.Cell("acme", at).Timestamp, Value: []byte(v)})
	}
	w, err := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	values := &stubValues{}
	r := New(dc.Open(tgt.Table), "c", p).DecodeValues(values)
	var got []Event
	err = r.Read(ctx, Query{Tenant: "acme", Limit: 3}, func(ev Event) bool { got = append(got, ev); return true })
	if err != nil || len(got) != 3 {
		t.Fatalf("read of 3: %d events, %v", len(got), err)
	}
	if string(got[0].Decoded) != `{"n":1}` || got[0].DecodeError != nil || string(got[0].Value) != "ok-1" {
		t.Errorf("e-0: %+v, want decoded", got[0])
	}
	if got[1].Decoded != nil || got[1].DecodeError == nil || got[1].DecodeError.Class != event.Undecodable || string(got[1].Value) != "bad" {
		t.Errorf("e-1: %+v, want the stored value and why", got[1])
	}
	if string(got[2].Decoded) != `{"n":2}` {
		t.Errorf("e-2: %+v, want decoded", got[2])
	}
	if fmt.Sprint(values.asked) != "[ok-1 bad ok-2]" {
		t.Errorf("decoded %v, want only the values returned", values.asked)
	}

	err = r.Read(ctx, Query{Tenant: "acme"}, func(Event) bool { return true })
	if err == nil || !strings.Contains(err.Error(), "the registry cannot be reached") || !strings.Contains(err.Error(), "#e-3") {
		t.Fatalf("read past a value the decoder fails on: %v, want its error, naming the row", err)
	}

	got = nil
	if err := New(dc.Open(tgt.Table), "c", p).Read(ctx, Query{Tenant: "acme"}, func(ev Event) bool { got = append(got, ev); return true }); err != nil || len(got) != 4 {
		t.Fatalf("read without a decoder: %d events, %v", len(got), err)
	}
	for _, ev := range got {
		if ev.Decoded != nil || ev.DecodeError != nil {
			t.Errorf("%s: %+v, want the value as stored alone", ev.EventID, ev)
		}
	}
}
