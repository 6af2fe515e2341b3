package registry

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/internal/bounded"
)

// hostile serves h as the registry, with a password file for basic auth.
func hostile(t *testing.T, h http.HandlerFunc) (*Schemas, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := open(t, Config{URL: srv.URL, Username: "cellttl", PasswordFile: pw}, contractMapping(t, event.DefaultFields()))
	return s, srv.URL
}

// readClass is the class of the value's error once its schema is known.
func readClass(t *testing.T, s *Schemas, v []byte) (event.Class, string) {
	t.Helper()
	if err := await(s, v, 10*time.Second); err != nil {
		t.Fatalf("Await: %v, want the schema decided", err)
	}
	_, err := s.ReadValue(v, nil)
	var e *event.Error
	if !errors.As(err, &e) {
		t.Fatalf("ReadValue: %v, want an *event.Error", err)
	}
	return e.Class, e.Reason
}

// A successful answer is read up to its bound: an endless one makes the
// schema invalid_schema after that many bytes, never an allocation of
// what it claims; a schema and its references past theirs too; a schema
// nesting past the depth any compiler is given, before one reads it.
func TestRegistryAnswersAreBounded(t *testing.T) {
	var sent atomic.Int64
	endless, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := bytes.Repeat([]byte(" "), 64<<10)
		for i := 0; i < 1024; i++ { // 64 MiB, if read
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	if class, reason := readClass(t, endless, click(t, 7, "u-1")); class != event.BadSchema || !strings.Contains(reason, "larger than") {
		t.Errorf("an endless answer: %s %q", class, reason)
	}
	if n := sent.Load(); n >= 32<<20 {
		t.Errorf("the server could send %d bytes: the answer was read past its bound", n)
	}

	deep := strings.Repeat(`{"type":"array","items":`, 10_000) + `"string"` + strings.Repeat("}", 10_000)
	f := newFake()
	f.add(8, sr.Schema{Schema: deep})
	big := `{"type":"enum","name":"Big","namespace":"test","symbols":["A"],"doc":"` + strings.Repeat("d", 3<<20) + `"}`
	for v := range 3 {
		f.addVersion("big", v+1, sr.Schema{Schema: big})
	}
	f.add(9, sr.Schema{Schema: clickAvro, References: []sr.SchemaReference{{Name: "a", Subject: "big", Version: 1}, {Name: "b", Subject: "big", Version: 2}, {Name: "c", Subject: "big", Version: 3}}})
	s, _ := open(t, Config{URL: f.serve(t)}, contractMapping(t, event.DefaultFields()))
	start := time.Now()
	if class, reason := readClass(t, s, click(t, 8, "u-1")); class != event.BadSchema || !strings.Contains(reason, "nests deeper") || time.Since(start) > 5*time.Second {
		t.Errorf("a schema 10,000 levels deep: %s %q in %s", class, reason, time.Since(start))
	}
	if class, reason := readClass(t, s, click(t, 9, "u-1")); class != event.BadSchema || !strings.Contains(reason, "references are larger than") {
		t.Errorf("references of 9 MiB: %s %q", class, reason)
	}
}

// A redirect is not followed: the registry at another place gets no
// request, nor the credentials; the values wait, and /readyz says where
// the redirect pointed.
func TestRegistryRedirectIsNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	s, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	})
	if err := awaitAnswer(t, s, click(t, 7, "u-1")); err == nil {
		t.Fatal("a redirect gave a schema")
	}
	if p := s.Problem(); p == nil || !strings.Contains(p.Error(), "a redirect to "+other.URL) || !strings.Contains(p.Error(), "not followed") {
		t.Errorf("problem %v, want the redirect named", p)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}

// A 404 is unknown_schema only with the registry's own code for it
// (40403): any other 404 is an outage (a wrong path, a proxy), and the
// values wait; the error says to check the URL's path.
func TestRegistryNotFoundNeedsItsCode(t *testing.T) {
	s, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	if err := awaitAnswer(t, s, click(t, 7, "u-1")); err == nil {
		t.Fatal("a 404 without the registry's code made the id known")
	}
	if p := s.Problem(); p == nil || !strings.Contains(p.Error(), "check the path of --schema-registry-url") {
		t.Errorf("problem %v", p)
	}
}

// What a registry says back is bounded where it lands (/readyz, /status,
// the log), and the credentials it echoes are struck out.
func TestRegistryErrorsAreBoundedAndStruck(t *testing.T) {
	s, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error_code":500,"message":"echo: %s %s"}`, r.Header.Get("Authorization"), strings.Repeat("x", 10<<20))
	})
	if err := awaitAnswer(t, s, click(t, 7, "u-1")); err == nil {
		t.Fatal("a 500 gave a schema")
	}
	p := s.Problem()
	token := base64.StdEncoding.EncodeToString([]byte("cellttl:s3cret-pw"))
	if p == nil || len(p.Error()) > 2*bounded.Answer || strings.Contains(p.Error(), "s3cret") || strings.Contains(p.Error(), token) || !strings.Contains(p.Error(), "[redacted]") {
		t.Errorf("problem of %d bytes: %.300v", len(fmt.Sprint(p)), p)
	}
	if st := s.Status(); len(st.Error) > 2*bounded.Answer {
		t.Errorf("status error of %d bytes", len(st.Error))
	}
}

// A schema a compiler refuses, and quotes whole, gives a reason cut to
// its bound: every letter of its values carries it.
func TestInvalidSchemaReasonIsBounded(t *testing.T) {
	f := newFake()
	f.add(7, sr.Schema{Schema: `{"type":"record","name":"X","fields":[` + strings.Repeat(`{"name":"f","type":"nope"},`, 50_000) + `]}`})
	s, _ := open(t, Config{URL: f.serve(t)}, contractMapping(t, event.DefaultFields()))
	class, reason := readClass(t, s, click(t, 7, "u-1"))
	if class != event.BadSchema || len(reason) > bounded.Answer+200 {
		t.Errorf("%s, a reason of %d bytes", class, len(reason))
	}
}

// The capped reader fails past its bound, and reads a body at it whole.
func TestCappedReader(t *testing.T) {
	for n, want := range map[int]error{maxAnswer: nil, maxAnswer + 1: errAnswerTooLarge} {
		got, err := io.ReadAll(&capped{r: io.NopCloser(bytes.NewReader(make([]byte, n))), left: maxAnswer})
		if !errors.Is(err, want) || (want == nil && len(got) != n) {
			t.Errorf("a body of %d bytes: %d read, %v", n, len(got), err)
		}
	}
}

// The registry is asked at start whether it answers as one: a URL whose
// path is not the registry's API, or that redirects, is said at once (and
// in /readyz), before any value needs a schema; a registry that answers
// is not.
func TestCheckAsksTheRegistry(t *testing.T) {
	f := newFake()
	good, _ := open(t, Config{URL: f.serve(t)}, contractMapping(t, event.DefaultFields()))
	if err := good.Check(t.Context()); err != nil {
		t.Errorf("a registry that answers: %v", err)
	}
	wrong, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	if err := wrong.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "check the path of --schema-registry-url") {
		t.Errorf("a wrong path: %v", err)
	}
	moved, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere.invalid/", http.StatusMovedPermanently)
	})
	if err := moved.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "a redirect to http://elsewhere.invalid/") {
		t.Errorf("a redirect: %v", err)
	}
}

// An attempt its caller cut short (a deadline, a stop) is no answer of
// the registry: nothing says the registry ran out of
// --schema-registry-timeout, and no outage begins. A slow answer on a
// loaded machine was reported as the registry's own timeout.
func TestCallerDeadlineIsNoRegistryTimeout(t *testing.T) {
	release := make(chan struct{})
	s, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error_code":500,"message":"down"}`)
	})
	err := await(s, click(t, 7, "u-1"), 200*time.Millisecond)
	if err == nil || strings.Contains(err.Error(), "--schema-registry-timeout") {
		t.Errorf("Await cut short by its caller: %v, want its caller's deadline, not the registry's timeout", err)
	}
	if p := s.Problem(); p != nil {
		t.Errorf("an attempt cut short by its caller began an outage: %v", p)
	}
	close(release)
	if err := awaitAnswer(t, s, click(t, 7, "u-1")); err == nil {
		t.Fatal("a 500 gave a schema")
	}
	if p := s.Problem(); p == nil || !strings.Contains(p.Error(), "HTTP 500") || strings.Contains(p.Error(), "--schema-registry-timeout") {
		t.Errorf("problem %v, want the registry's 500", p)
	}
}
