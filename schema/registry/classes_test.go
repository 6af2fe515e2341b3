package registry

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cellttl/cellttl/event"
)

// An id the registry answers 404 for is an unknown schema: the value is
// dead-lettered (unknown_schema) at once, and the worker is not held.
func TestNotFoundIsAnUnknownSchema(t *testing.T) {
	f := newFake()
	s, _ := open(t, Config{URL: f.serve(t)}, contractMapping(t, event.DefaultFields()))
	v := click(t, 404, "u-1")
	if err := await(s, v, 5*time.Second); err != nil {
		t.Fatalf("Await of an id the registry does not have: %v, want nil (known to be unknown)", err)
	}
	var e *event.Error
	if _, err := s.ReadValue(v, nil); !errors.As(err, &e) || e.Class != event.UnknownSchema {
		t.Fatalf("ReadValue: %v, want an unknown_schema *event.Error", err)
	}
	if _, err := s.DecodeValue(t.Context(), v); !errors.As(err, &e) || e.Class != event.UnknownSchema {
		t.Fatalf("DecodeValue: %v, want an unknown_schema *event.Error", err)
	}
	if st := s.Status(); st.Unknown != 1 || st.Cached != 0 || st.Waiting != "" || s.Problem() != nil {
		t.Fatalf("status %+v, problem %v: want 1 unknown id, nothing waiting", st, s.Problem())
	}
}

// The registry failing (5xx, the connection refused) is never the value's
// fault: the worker holds the value, uncommitted, and says why (Problem,
// /readyz), until the registry answers; worker read reports it, naming the
// registry. Neither is a dead letter (*event.Error).
func TestUnavailableHoldsTheValue(t *testing.T) {
	refused := func(t *testing.T) (string, func()) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + l.Addr().String()
		l.Close() // nothing listens there now
		return url, nil
	}
	unavailable := func(t *testing.T) (string, func()) {
		f := newFake()
		f.add(7, sr.Schema{Schema: clickAvro})
		f.status.Store(http.StatusServiceUnavailable)
		return f.serve(t), func() { f.status.Store(0) }
	}
	for name, tc := range map[string]struct {
		start func(t *testing.T) (url string, heal func())
		says  string
	}{
		"503":                {unavailable, "HTTP 503"},
		"connection refused": {refused, "connection refused"},
	} {
		t.Run(name, func(t *testing.T) {
			url, heal := tc.start(t)
			s, logs := open(t, Config{URL: url, Timeout: time.Second}, contractMapping(t, event.DefaultFields()))
			v := click(t, 7, "u-1")
			err := awaitAnswer(t, s, v)
			var e *event.Error
			if err == nil || errors.As(err, &e) {
				t.Fatalf("Await: %v, want the wait's end, no *event.Error", err)
			}
			if p := s.Problem(); p == nil || !strings.Contains(p.Error(), "events wait for the schema registry") || !strings.Contains(p.Error(), tc.says) {
				t.Fatalf("Problem: %v, want the wait and %q", p, tc.says)
			}
			if st := s.Status(); st.Waiting == "" || st.Cached != 0 || st.Unknown != 0 {
				t.Fatalf("status %+v, want waiting and nothing cached", st)
			}
			if !strings.Contains(logs.String(), "none is dead-lettered for it") {
				t.Fatalf("no log of the wait:\n%s", logs)
			}
			// worker read is told at once, with the registry's URL.
			_, err = s.DecodeValue(t.Context(), v)
			var ue *UnavailableError
			if !errors.As(err, &ue) || errors.As(err, &e) || !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("DecodeValue: %v, want an *UnavailableError naming %s and %q", err, url, tc.says)
			}

			if heal != nil {
				heal()
				if err := await(s, v, 5*time.Second); err != nil {
					t.Fatalf("Await once the registry answers: %v", err)
				}
				if p := s.Problem(); p != nil {
					t.Fatalf("Problem once the registry answers: %v", p)
				}
				return
			}
			// The worker's own read of the value waits, until stopped.
			done := make(chan error, 1)
			go func() {
				_, err := s.ReadValue(v, nil)
				done <- err
			}()
			select {
			case err := <-done:
				t.Fatalf("ReadValue returned %v while the registry is down, want it to wait", err)
			case <-time.After(500 * time.Millisecond):
			}
			s.Close()
			if err := <-done; !errors.Is(err, ErrStopped) || errors.As(err, &e) {
				t.Fatalf("ReadValue after Close: %v, want ErrStopped and no *event.Error", err)
			}
		})
	}
}

// A registry that takes connections and never answers costs one request
// its timeout, not the wait of every value behind it; worker read gives up
// after a few.
func TestSlowRegistryIsBoundedByTheTimeout(t *testing.T) {
	f := newFake()
	f.add(7, sr.Schema{Schema: clickAvro})
	f.add(8, sr.Schema{Schema: clickAvro})
	held := 0
	f.hold = func(r *http.Request) bool {
		// The first request for id 7 and every one for id 8 hang.
		if strings.HasSuffix(r.URL.Path, "/8") {
			return true
		}
		held++
		return held == 1
	}
	url := f.serve(t)
	s, _ := open(t, Config{URL: url, Timeout: 300 * time.Millisecond}, contractMapping(t, event.DefaultFields()))
	start := time.Now()
	if err := await(s, click(t, 7, "u-1"), 5*time.Second); err != nil {
		t.Fatalf("Await: %v, want the second request's answer", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Await took %s: a request hanging held it past its timeout", d)
	}
	if n := f.hitsOf("/schemas/ids/7"); n != 2 {
		t.Fatalf("%d requests for id 7, want 2 (one timed out, one answered)", n)
	}

	start = time.Now()
	_, err := s.DecodeValue(t.Context(), click(t, 8, "u-1"))
	var ue *UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), "no answer within --schema-registry-timeout 300ms") {
		t.Fatalf("DecodeValue: %v, want an *UnavailableError naming %s and the timeout", err, url)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("DecodeValue took %s, want about %d tries of 300ms", d, decodeAttempts)
	}
	if n := f.hitsOf("/schemas/ids/8"); n != decodeAttempts {
		t.Fatalf("%d requests for id 8, want %d", n, decodeAttempts)
	}
}
