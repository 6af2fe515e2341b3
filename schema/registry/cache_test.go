package registry

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cellttl/cellttl/event"
)

// The cache holds --schema-cache-size compiled schemas however many ids
// the values name: one beyond is dropped, and fetched again when a value
// needs it. /status (Status) and the gauge say what it holds; ids the
// registry does not know are kept apart and do not count.
func TestCacheIsBounded(t *testing.T) {
	const bound, ids = 2, 6
	f := newFake()
	for id := 1; id <= ids; id++ {
		f.add(id, sr.Schema{Schema: clickAvro})
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	c := Config{Format: "avro", URL: f.serve(t), CacheSize: bound, Timeout: 5 * time.Second}
	s, err := New(c, contractMapping(t, event.DefaultFields()), mp, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)

	check := func(when string, wantCached, wantUnknown int) {
		t.Helper()
		if st := s.Status(); st.Cached != wantCached || st.Unknown != wantUnknown || st.Limit != bound {
			t.Fatalf("%s: status %+v, want %d cached, %d unknown, limit %d", when, st, wantCached, wantUnknown, bound)
		}
		if g := gauge(t, reader, "cellttl.schema_registry.schemas_cached"); g != int64(wantCached) {
			t.Fatalf("%s: gauge schemas_cached %d, want %d", when, g, wantCached)
		}
	}
	read := func(id int) {
		t.Helper()
		v := click(t, uint32(id), fmt.Sprint("u-", id))
		if err := await(s, v, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		fd, err := s.ReadValue(v, nil)
		if err != nil {
			t.Fatalf("id %d: %v", id, err)
		}
		ev, err := (&event.Decoder{MaxBytes: 1 << 20, MaxClockSkew: time.Hour, Mapping: contractMapping(t, event.DefaultFields()), Values: fixedFound{fd}}).DecodeRecord(&event.Source{Value: v, Time: at})
		if err != nil || ev.User != fmt.Sprint("u-", id) {
			t.Fatalf("id %d: %+v, %v: a value read with another id's schema?", id, ev, err)
		}
	}
	for id := 1; id <= ids; id++ {
		read(id)
		check(fmt.Sprintf("after id %d", id), min(id, bound), 0)
	}
	if err := await(s, click(t, 404, ""), 5*time.Second); err != nil { // an id the registry does not have
		t.Fatal(err)
	}
	check("after an unknown id", bound, 1)

	// Every id again: those dropped are fetched again, once; those kept
	// are not asked for.
	refetched := 0
	for id := 1; id <= ids; id++ {
		kept := s.Ready(click(t, uint32(id), ""))
		before := f.hitsOf(fmt.Sprintf("/schemas/ids/%d", id))
		read(id)
		after := f.hitsOf(fmt.Sprintf("/schemas/ids/%d", id))
		switch {
		case kept && after != before:
			t.Fatalf("id %d was cached and asked for again", id)
		case !kept && after != before+1:
			t.Fatalf("id %d was dropped and asked for %d times, want once", id, after-before)
		case !kept:
			refetched++
		}
		check(fmt.Sprintf("again, after id %d", id), bound, 1)
	}
	if refetched < ids-bound {
		t.Fatalf("%d ids fetched again, want at least %d (the cache holds %d)", refetched, ids-bound, bound)
	}
}

// fixedFound hands a decoder fields already read.
type fixedFound struct{ fd event.Found }

func (f fixedFound) ReadValue([]byte, *event.Mapping) (event.Found, error) { return f.fd, nil }

// gauge is an int64 gauge's value as exported.
func gauge(t *testing.T, r *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == name && len(g.DataPoints) == 1 {
				return g.DataPoints[0].Value
			}
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// A slow answer for one id holds no other id's fetch: each partition waits
// for its own schema (the pipeline parks it), and callers of one id share
// one request. The fetches ran one at a time, under one lock.
func TestFetchesOfOtherIdsDoNotWait(t *testing.T) {
	f := newFake()
	f.add(7, sr.Schema{Schema: clickAvro})
	f.add(8, sr.Schema{Schema: clickAvro})
	arrived, release := make(chan struct{}, 3), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/schemas/ids/7" {
			arrived <- struct{}{}
			<-release // then answered
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s, _ := open(t, Config{URL: srv.URL, Timeout: time.Minute}, contractMapping(t, event.DefaultFields()))

	slow := make(chan error, 3)
	for range 3 {
		go func() { slow <- await(s, click(t, 7, "u-1"), time.Minute) }()
	}
	<-arrived
	fast := make(chan error, 1)
	go func() { fast <- await(s, click(t, 8, "u-1"), time.Minute) }()
	select {
	case err := <-fast:
		if err != nil {
			t.Errorf("id 8 while id 7's answer is slow: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("id 8 not fetched within 5s while id 7's answer is slow")
	}
	close(release)
	for range 3 {
		if err := <-slow; err != nil {
			t.Fatalf("id 7 once answered: %v", err)
		}
	}
	if n := f.hitsOf("/schemas/ids/7"); n != 1 {
		t.Errorf("%d requests for id 7, want its three callers to share one", n)
	}
}
