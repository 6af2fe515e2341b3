package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/twmb/franz-go/pkg/sr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/internal/bounded"
	"github.com/cellttl/cellttl/internal/retry"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/schema"
)

// UnavailableError is DecodeValue's error when the registry cannot give a
// schema: unreachable, too slow, an error status other than 404 (5xx,
// refused credentials). It names the registry; it is about the registry,
// not the value, so a reader stops on it rather than go on without it.
type UnavailableError struct {
	URL string
	ID  uint32
	Err error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the schema registry %s cannot give schema %d: %v", e.URL, e.ID, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// decodeAttempts is how many times DecodeValue asks the registry for one
// schema before it gives up: a blip is ridden out, an outage reported.
const decodeAttempts = 3

// DecodeValue decodes a stored value, framed as produced, into JSON (see
// schema.Compiled.JSON), its schema fetched through the cache as the
// worker's are. A value that cannot be decoded is an *event.Error that
// says why (not_framed, unknown_schema, invalid_schema, undecodable); the
// registry failing is an *UnavailableError. Unlike ReadValue it does not
// wait for the registry: it is for people reading the stored events, who
// are told at once.
func (s *Schemas) DecodeValue(ctx context.Context, value []byte) (json.RawMessage, error) {
	id, payload, err := schema.SchemaID(value)
	if err != nil {
		return nil, err
	}
	e := s.lookup(id)
	if e == nil {
		if e, err = s.fetchFew(ctx, id); err != nil {
			return nil, err
		}
	}
	if e.err != nil {
		return nil, e.err
	}
	return e.c.JSON(payload)
}

// fetchFew is fetch with a few attempts rather than endless ones, and no
// outage to report: the caller reports it.
func (s *Schemas) fetchFew(ctx context.Context, id uint32) (*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.lookup(id); e != nil {
		return e, nil
	}
	wait := waitfor.Begin(ctx, waitfor.Registry, fmt.Sprintf("schema id %d", id))
	b := retry.New(ctx, s.policy)
	for {
		e, err := s.resolve(ctx, id)
		if err == nil {
			wait.End(nil)
			s.store(id, e)
			return e, nil
		}
		s.fetches.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "unavailable")))
		if b.Attempt() >= decodeAttempts || !b.Wait() {
			return nil, &UnavailableError{URL: s.url, ID: id, Err: errors.Join(wait.End(s.timedOut(ctx, cause(err))), ctx.Err())}
		}
	}
}

// cause is what went wrong with a request, without the request (the error
// names the registry already): "dial tcp …: connection refused", "tls: …",
// "HTTP 503 …".
func cause(err error) error {
	var se *statusError
	if errors.As(err, &se) {
		return se
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// statusError names the HTTP status and request of a registry's error
// answer, whose own text is only the registry's message ("no backend").
type statusError struct{ re *sr.ResponseError }

func (e *statusError) Error() string {
	msg := fmt.Sprintf("%s %s: HTTP %d: %s", e.re.Method, redact(e.re.URL), e.re.StatusCode, e.re.Error())
	if e.re.StatusCode == http.StatusNotFound && !e.registryNotFound() {
		msg += " (not the registry's own not-found answer, which carries an error code: check the path of --schema-registry-url)"
	}
	return bounded.Text(msg, bounded.Answer)
}

// registryNotFound reports whether the answer is a registry's own "not
// found" (its error codes 40401, 40402, 40403), not a 404 of whatever
// else answers at the URL (a wrong path, a proxy).
func (e *statusError) registryNotFound() bool {
	return e.re.StatusCode == http.StatusNotFound && e.re.ErrorCode >= 40401 && e.re.ErrorCode <= 40403
}

func (e *statusError) Unwrap() error { return e.re }

// withStatus wraps a registry's error answer in a statusError.
func withStatus(err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return &statusError{re}
	}
	return err
}
