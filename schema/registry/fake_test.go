package registry

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Every goroutine a test starts (the registry client's connections among
// them) has ended when the package's tests end.
func TestMain(m *testing.M) { testenv.Main(m) }

// fake is a Confluent-compatible registry's read API: schemas by id,
// subjects' versions (what references name), with faults to order.
type fake struct {
	mu       sync.Mutex
	ids      map[int]sr.Schema
	versions map[string]sr.SubjectSchema // by "subject/version"
	hits     map[string]int              // requests, by path
	auths    []string                    // the Authorization header of each request

	// allow, when set, answers 401 to a request it refuses.
	allow func(r *http.Request) bool
	// status, when not 0, answers every request with it.
	status atomic.Int32
	// hold, when it returns true for a request, keeps it waiting until
	// the client gives up or the test ends.
	hold    func(r *http.Request) bool
	release chan struct{}
}

func newFake() *fake {
	return &fake{ids: map[int]sr.Schema{}, versions: map[string]sr.SubjectSchema{}, hits: map[string]int{}, release: make(chan struct{})}
}

// serve starts f on a plain HTTP server, stopped when t ends.
func (f *fake) serve(t *testing.T) string {
	srv := httptest.NewServer(f)
	f.cleanup(t, srv)
	return srv.URL
}

// cleanup lets held requests go before srv closes (Close waits for them).
func (f *fake) cleanup(t *testing.T, srv *httptest.Server) {
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.release) })
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.hits[r.URL.Path]++
	f.auths = append(f.auths, r.Header.Get("Authorization"))
	// Under f.mu: hold and allow may keep state.
	held := f.hold != nil && f.hold(r)
	allowed := f.allow == nil || f.allow(r)
	f.mu.Unlock()
	if held {
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		return
	}
	if s := f.status.Load(); s != 0 {
		http.Error(w, "no backend", int(s))
		return
	}
	if !allowed {
		answer(w, http.StatusUnauthorized, map[string]any{"error_code": 401, "message": "Unauthorized"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var id int
	if r.URL.Path == "/config" {
		answer(w, http.StatusOK, map[string]any{"compatibilityLevel": "BACKWARD"})
		return
	}
	if _, err := fmt.Sscanf(r.URL.Path, "/schemas/ids/%d", &id); err == nil {
		if s, ok := f.ids[id]; ok {
			answer(w, http.StatusOK, s)
			return
		}
	} else if rest, ok := strings.CutPrefix(r.URL.Path, "/subjects/"); ok {
		subject, v, _ := strings.Cut(rest, "/versions/")
		version, _ := strconv.Atoi(v)
		if s, ok := f.versions[fmt.Sprintf("%s/%d", subject, version)]; ok {
			answer(w, http.StatusOK, s)
			return
		}
	}
	// A registry's own not-found answers carry a code: 40401 for a
	// subject, 40403 for a schema id (Confluent's, and Apicurio's
	// Confluent-compatible API, answer so).
	if strings.HasPrefix(r.URL.Path, "/subjects/") {
		answer(w, http.StatusNotFound, map[string]any{"error_code": 40401, "message": "Subject not found"})
		return
	}
	answer(w, http.StatusNotFound, map[string]any{"error_code": 40403, "message": "Schema not found"})
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fake) add(id int, s sr.Schema) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids[id] = s
}

func (f *fake) addVersion(subject string, version int, s sr.Schema) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions[fmt.Sprintf("%s/%d", subject, version)] = sr.SubjectSchema{Subject: subject, Version: version, ID: 1000 + len(f.versions), Schema: s}
}

func (f *fake) hitsOf(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

// clickAvro is the contract's fields in an Avro record.
const clickAvro = `{"type":"record","name":"Click","namespace":"test","fields":[
 {"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},
 {"name":"user_id","type":["null","string"],"default":null},
 {"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}}]}`

var at = time.Date(2026, 11, 21, 9, 0, 0, 123_000_000, time.UTC)

// click is an Avro click of user framed under id.
func click(t testing.TB, id uint32, user string) []byte {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(clickAvro), map[string]any{"event_id": "e-1", "tenant_id": "acme", "user_id": user, "occurred_at": at})
	if err != nil {
		t.Fatal(err)
	}
	return frame(id, b)
}

func frame(id uint32, payload []byte) []byte {
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], id)
	return append(b, payload...)
}

func contractMapping(t testing.TB, fields event.Fields) *event.Mapping {
	t.Helper()
	m, err := fields.Compile(event.Labels{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// open returns the schemas of c (Avro unless it says otherwise), closed
// when t ends, and their log.
func open(t *testing.T, c Config, m *event.Mapping) (*Schemas, *testenv.Buffer) {
	t.Helper()
	if c.Format == "" {
		c.Format = "avro"
	}
	if c.CacheSize == 0 {
		c.CacheSize = 100
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.Buffer{}
	s, err := New(c, m, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

// awaitAnswer is Await of a value whose schema the registry will not
// give, repeated a second at a time until the registry's answer is the
// Problem: a second is no bound on a loaded machine, where an answer of
// megabytes takes longer, and an attempt its caller cut short is no answer.
func awaitAnswer(t *testing.T, s *Schemas, value []byte) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := await(s, value, time.Second)
		if err == nil || s.Problem() != nil || time.Now().After(deadline) {
			return err
		}
	}
}

// await is Schemas.Await under a deadline.
func await(s *Schemas, value []byte, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return s.Await(ctx, value)
}
