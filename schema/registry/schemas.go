package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/internal/bounded"
	"github.com/cellttl/cellttl/internal/retry"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/schema"
)

// Schemas is the worker's view of the registry: the compiled schema of
// each id met, read through a bounded cache, and an event.ValueReader. A
// schema not yet known is fetched when a value needs it, and the value
// waits until the registry answers (see Await).
type Schemas struct {
	format  schema.Format
	mapping *event.Mapping
	client  *sr.Client
	// transport is the client's, whose idle connections Close closes.
	transport *http.Transport
	// url is the registry's, as errors name it; timeout bounds a request.
	url     string
	timeout time.Duration
	log     *slog.Logger
	limit   int
	// life bounds the waits of ReadValue, which has no context of its
	// own: Close ends it.
	life   context.Context
	cancel context.CancelFunc
	policy retry.Policy

	// known is copied on write: the hot path reads it without a lock.
	known atomic.Pointer[map[uint32]*entry]
	mu    sync.Mutex // writers of known, and inflight
	// inflight has the ids being fetched, each closed when its fetch
	// ends; slots bounds how many are asked at once.
	inflight map[uint32]chan struct{}
	slots    chan struct{}
	// waiting is set while a value waits for the registry: since when and
	// why, for /readyz and the metric.
	waiting atomic.Pointer[outage]

	fetches metric.Int64Counter

	// cmu guards Check's last answer, and when it was asked.
	cmu       sync.Mutex
	checkedAt time.Time
	checkErr  error
}

// entry is what an id stands for: a compiled schema, or why values of it
// cannot be read (an *event.Error: unknown_schema, invalid_schema).
type entry struct {
	c   *schema.Compiled
	err error
	// at is when a refusal was learnt: an unknown id is asked again after
	// a while (negativeTTL), in case it was registered since.
	at time.Time
}

type outage struct {
	since time.Time
	err   error
}

// negativeTTL is how long an id the registry did not know stays unknown
// before it is asked again; maxNegative bounds how many such ids are kept,
// apart from the schemas, so that a producer of garbage ids cannot push
// the real schemas out.
const (
	negativeTTL = time.Minute
	maxNegative = 1000
)

// maxFetches bounds the requests to the registry under way at once: the
// partitions waiting for unknown ids share them.
const maxFetches = 4

// New returns the schemas of the registry c names, compiled for mapping
// m; its metrics go to mp (none when nil).
func New(c Config, m *event.Mapping, mp metric.MeterProvider, log *slog.Logger) (*Schemas, error) {
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsCfg
	// No redirect is followed, and every answer is read within a bound
	// (guard): the registry's answers are input.
	opts := []sr.ClientOpt{sr.URLs(c.URL), sr.HTTPClient(&http.Client{Transport: guard{transport}, Timeout: timeout, CheckRedirect: noRedirect}), sr.UserAgent("cellttl")}
	if c.PasswordFile != "" {
		user, file := c.Username, c.PasswordFile
		opts = append(opts, sr.PreReq(func(req *http.Request) error {
			pw, err := password(file)
			if err != nil {
				return err
			}
			req.SetBasicAuth(user, pw)
			return nil
		}))
	}
	client, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry client: %w", err)
	}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	s := &Schemas{format: c.ValueFormat(), mapping: m, client: client, transport: transport, url: redact(c.URL), timeout: timeout, log: log, limit: c.CacheSize,
		policy: retry.Policy{Initial: 200 * time.Millisecond, Max: 10 * time.Second}}
	s.inflight, s.slots = map[uint32]chan struct{}{}, make(chan struct{}, maxFetches)
	s.life, s.cancel = context.WithCancel(context.Background())
	empty := map[uint32]*entry{}
	s.known.Store(&empty)
	if err := s.registerMetrics(mp.Meter("github.com/cellttl/cellttl/schema/registry")); err != nil {
		return nil, err
	}
	return s, nil
}

// URL is the registry's URL, without credentials, query or fragment.
func (s *Schemas) URL() string { return s.url }

// Close ends the waits of ReadValue, and closes the idle connections to
// the registry.
func (s *Schemas) Close() {
	s.cancel()
	s.transport.CloseIdleConnections()
}

// ErrStopped is ReadValue's error when Close ended its wait for the
// registry: the record is held, not rejected.
var ErrStopped = errors.New("stopped while waiting for the schema registry")

// ReadValue reads m's fields of a framed value: the event.ValueReader of
// the worker's decoder. Values of an id not yet known wait for the
// registry (until Close); the pipeline waits beforehand through Await,
// where it can tell the wait.
func (s *Schemas) ReadValue(value []byte, m *event.Mapping) (event.Found, error) {
	id, payload, err := schema.SchemaID(value)
	if err != nil {
		return event.Found{}, err
	}
	e := s.lookup(id)
	if e == nil {
		if e, err = s.fetch(s.life, id); err != nil {
			return event.Found{}, errors.Join(ErrStopped, err)
		}
	}
	if e.err != nil {
		return event.Found{}, e.err
	}
	return e.c.Read(payload)
}

func (s *Schemas) lookup(id uint32) *entry {
	e := (*s.known.Load())[id]
	if e != nil && e.err != nil && time.Since(e.at) > negativeTTL {
		return nil
	}
	return e
}

// Ready reports whether value can be read without waiting: its id's
// schema is known (or known to be unusable), or it has no framing.
func (s *Schemas) Ready(value []byte) bool {
	id, _, err := schema.SchemaID(value)
	return err != nil || s.lookup(id) != nil
}

// Await fetches the schema of value's id unless known, waiting while the
// registry cannot answer, until ctx ends (its error then).
func (s *Schemas) Await(ctx context.Context, value []byte) error {
	id, _, err := schema.SchemaID(value)
	if err != nil || s.lookup(id) != nil {
		return nil
	}
	_, err = s.fetch(ctx, id)
	return err
}

// resolve asks the registry for id's schema and its references and
// compiles it. An error is the registry's (retried); a schema the
// registry does not have, or that cannot read values, is an entry.
func (s *Schemas) resolve(ctx context.Context, id uint32) (*entry, error) {
	// Each request is bounded by the client's timeout; the whole, with
	// the references, by a few of them.
	rctx, cancel := context.WithTimeout(ctx, 3*s.timeout)
	defer cancel()
	sch, err := s.client.SchemaByID(rctx, int(id))
	switch {
	case notFound(err, 40403):
		s.fetches.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "not_found")))
		return &entry{at: time.Now(), err: &event.Error{Class: event.UnknownSchema,
			Reason: fmt.Sprintf("the schema registry has no schema of id %d (the value's framing names it)", id)}}, nil
	case errors.Is(err, errAnswerTooLarge):
		return s.invalid(ctx, id, err), nil
	case err != nil:
		return nil, fmt.Errorf("schema id %d: %w", id, s.timedOut(ctx, withStatus(err)))
	}
	src := schema.Source{Type: sch.Type, Text: sch.Schema}
	total := len(sch.Schema)
	if src.Refs, err = s.references(rctx, sch.References, map[string]bool{}, &total, nil); err != nil {
		var bad *badReference
		if !errors.As(err, &bad) {
			return nil, fmt.Errorf("schema id %d: %w", id, s.timedOut(ctx, withStatus(err)))
		}
		return s.invalid(ctx, id, err), nil
	}
	for _, text := range append([]string{src.Text}, refTexts(src.Refs)...) {
		if n := nesting(text); n > maxNesting {
			return s.invalid(ctx, id, fmt.Errorf("the schema %w: %d levels, more than %d", errTooDeep, n, maxNesting)), nil
		}
	}
	c, err := schema.Compile(rctx, s.format, src, s.mapping)
	if err != nil {
		return s.invalid(ctx, id, err), nil
	}
	s.fetches.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "found")))
	return &entry{c: c}, nil
}

// timedOut names --schema-registry-timeout in an error of a request that
// ran out of it. Go's http.Client says "Client.Timeout exceeded" only
// when its own timer wins a race with the request's context deadline,
// which its transport (guard, one it does not know) makes likely to lose:
// the error then said only "context deadline exceeded". A request cut
// short by its caller's own deadline (ctx) did not run out of the
// registry's time, and is not said to.
func (s *Schemas) timedOut(ctx context.Context, err error) error {
	var ne net.Error
	if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("no answer within --schema-registry-timeout %s: %w", s.timeout, err)
	}
	return err
}

// invalid is the entry of a schema that cannot read values. Its reason,
// which goes into every letter of its values, and the log line quote the
// compiler's complaint cut to bounded.Answer: a compiler may quote the
// whole schema, which the registry chose.
func (s *Schemas) invalid(ctx context.Context, id uint32, err error) *entry {
	why := bounded.Text(err.Error(), bounded.Answer)
	s.fetches.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "invalid")))
	s.log.Warn("a schema of the registry cannot read values; its values are dead-lettered (invalid_schema)", "schema_id", id, "err", why)
	return &entry{at: time.Now(), err: &event.Error{Class: event.BadSchema,
		Reason: fmt.Sprintf("schema %d cannot read values as --value-format %s: %s", id, s.format, why)}}
}

func refTexts(refs []schema.Ref) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.Text
	}
	return out
}

// badReference is a reference the registry does not have: the schema is
// unusable, not the registry down.
type badReference struct{ err error }

func (b *badReference) Error() string { return b.err.Error() }

// maxReferences bounds the schemas one schema may pull in.
const maxReferences = 100

// references fetches refs and theirs, each schema after those it needs,
// adding their sizes to total (at most maxSchemas).
func (s *Schemas) references(ctx context.Context, refs []sr.SchemaReference, seen map[string]bool, total *int, out []schema.Ref) ([]schema.Ref, error) {
	for _, r := range refs {
		key := fmt.Sprintf("%s/%d", r.Subject, r.Version)
		if seen[key] {
			continue
		}
		seen[key] = true
		if len(seen) > maxReferences {
			return nil, &badReference{fmt.Errorf("more than %d referenced schemas", maxReferences)}
		}
		ss, err := s.client.SchemaByVersion(ctx, r.Subject, r.Version)
		switch {
		case notFound(err, 40401, 40402):
			return nil, &badReference{fmt.Errorf("referenced schema %s (subject %s version %d) is not in the registry", r.Name, r.Subject, r.Version)}
		case errors.Is(err, errAnswerTooLarge):
			return nil, &badReference{err}
		case err != nil:
			return nil, err
		}
		if *total += len(ss.Schema.Schema); *total > maxSchemas {
			return nil, &badReference{fmt.Errorf("the schema and its references are larger than %d bytes together", maxSchemas)}
		}
		if out, err = s.references(ctx, ss.References, seen, total, out); err != nil {
			return nil, err
		}
		out = append(out, schema.Ref{Name: r.Name, Text: ss.Schema.Schema})
	}
	return out, nil
}

// notFound reports whether err is the registry's own "not found", one of
// codes (40401 subject, 40402 version, 40403 schema): any other 404 is not
// the registry's word on the id (a wrong path, a proxy), and the values
// wait, as for an outage.
func notFound(err error, codes ...int) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound && slices.Contains(codes, re.ErrorCode)
}

// store adds e under id, copying the map: schemas up to the cache size,
// refusals up to maxNegative, dropping one of the kind (any) beyond.
func (s *Schemas) store(id uint32, e *entry) {
	old := *s.known.Load()
	next := make(map[uint32]*entry, len(old)+1)
	var good, bad int
	for k, v := range old {
		next[k] = v
		if v.err == nil {
			good++
		} else {
			bad++
		}
	}
	for k, v := range next {
		if e.err == nil && good >= s.limit && v.err == nil {
			delete(next, k)
			good--
		} else if e.err != nil && bad >= maxNegative && v.err != nil {
			delete(next, k)
			bad--
		}
	}
	next[id] = e
	s.known.Store(&next)
}

// checkEvery is how often Check asks the registry again.
const checkEvery = 30 * time.Second

// Check asks the registry whether it answers at its URL as a registry does
// (its global compatibility, a small answer of every Confluent-compatible
// registry), at most every checkEvery, and returns why not: a wrong URL
// path, refused credentials, a redirect or a registry down show at start
// and in /readyz, before any value needs a schema.
func (s *Schemas) Check(ctx context.Context) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if !s.checkedAt.IsZero() && time.Since(s.checkedAt) < checkEvery {
		return s.checkErr
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	wait := waitfor.Begin(ctx, waitfor.Registry, "its compatibility setting")
	err := wait.End(s.client.Compatibility(cctx)[0].Err)
	s.checkedAt, s.checkErr = time.Now(), nil
	if err != nil {
		s.checkErr = fmt.Errorf("the schema registry at %s does not answer as a registry: %w", s.url, cause(withStatus(err)))
	}
	return s.checkErr
}

// Problem is why values wait for the registry, nil when none does: for
// /readyz.
func (s *Schemas) Problem() error {
	if w := s.waiting.Load(); w != nil {
		return fmt.Errorf("events wait for the schema registry since %s (none is dead-lettered for it): %w", w.since.Format(time.RFC3339), w.err)
	}
	return nil
}

// Status is the registry's part of /status.
type Status struct {
	Format  string `json:"value_format"`
	Cached  int    `json:"schemas_cached"`
	Unknown int    `json:"schema_ids_unknown"`
	Limit   int    `json:"schema_cache_size"`
	Waiting string `json:"waiting_since,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Status says what the cache holds and whether values wait.
func (s *Schemas) Status() Status {
	st := Status{Format: s.format.String(), Limit: s.limit}
	for _, e := range *s.known.Load() {
		if e.err == nil {
			st.Cached++
		} else {
			st.Unknown++
		}
	}
	if w := s.waiting.Load(); w != nil {
		st.Waiting, st.Error = w.since.Format(time.RFC3339), w.err.Error()
	}
	return st
}

func (s *Schemas) registerMetrics(m metric.Meter) error {
	var err error
	if s.fetches, err = m.Int64Counter("cellttl.schema_registry.fetches", metric.WithUnit("{request}"),
		metric.WithDescription("schemas asked of the registry, by outcome: found, not_found, invalid (cannot read values), unavailable (retried: the events wait)")); err != nil {
		return fmt.Errorf("register schema registry metrics: %w", err)
	}
	for _, o := range []string{"found", "not_found", "invalid", "unavailable"} {
		s.fetches.Add(context.Background(), 0, metric.WithAttributes(attribute.String("outcome", o)))
	}
	waiting, err1 := m.Int64ObservableGauge("cellttl.schema_registry.waiting",
		metric.WithDescription("1 while events wait for the schema registry (unreachable, 5xx, refused credentials): nothing is committed past them"))
	cached, err2 := m.Int64ObservableGauge("cellttl.schema_registry.schemas_cached", metric.WithUnit("{schema}"),
		metric.WithDescription("compiled schemas kept, by id, up to --schema-cache-size"))
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("register schema registry metrics: %w", err)
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := s.Status()
		w := int64(0)
		if st.Waiting != "" {
			w = 1
		}
		o.ObserveInt64(waiting, w)
		o.ObserveInt64(cached, int64(st.Cached))
		return nil
	}, waiting, cached)
	if err != nil {
		return fmt.Errorf("register schema registry metrics: %w", err)
	}
	return nil
}
