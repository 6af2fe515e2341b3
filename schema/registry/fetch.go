package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/internal/retry"
	"github.com/cellttl/cellttl/internal/waitfor"
)

// fetch gets, compiles and caches id's schema, trying again with backoff
// for as long as the registry does not answer or answers with an error
// that is not about the id (5xx, 401, 403, a timeout): those are faults
// time or an operator heals, and the record waits for them. Only a 404
// makes the id unknown. Retrying forever is right here: nothing is
// committed past the record meanwhile, and the wait is loud (Problem, the
// metric, the log).
//
// Fetches of different ids run side by side (the pipeline's partitions
// each wait for their own), at most maxFetches at once; callers of one id
// share its fetch.
func (s *Schemas) fetch(ctx context.Context, id uint32) (*entry, error) {
	for {
		s.mu.Lock()
		if e := s.lookup(id); e != nil {
			s.mu.Unlock()
			return e, nil // fetched by another caller meanwhile
		}
		busy, shared := s.inflight[id]
		if !shared {
			busy = make(chan struct{})
			s.inflight[id] = busy
		}
		s.mu.Unlock()
		if shared {
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("schema id %d: %w", id, ctx.Err())
			}
		}
		e, err := s.fetchOwn(ctx, id)
		s.mu.Lock()
		if err == nil {
			s.store(id, e)
		}
		delete(s.inflight, id)
		close(busy)
		s.mu.Unlock()
		return e, err
	}
}

// fetchOwn is fetch by the one caller that asks the registry for id.
func (s *Schemas) fetchOwn(ctx context.Context, id uint32) (*entry, error) {
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	case <-ctx.Done():
		return nil, fmt.Errorf("schema id %d: %w", id, ctx.Err())
	}
	// One wait of a command that bounds its waits (worker redrive), the
	// attempts included: none of them is an answer.
	wait := waitfor.Begin(ctx, waitfor.Registry, fmt.Sprintf("schema id %d", id))
	b := retry.New(ctx, s.policy)
	for {
		e, err := s.resolve(ctx, id)
		if err == nil {
			wait.End(nil)
			if w := s.waiting.Swap(nil); w != nil {
				s.log.Info("the schema registry answers again; held events go on", "waited", time.Since(w.since).Round(time.Millisecond).String())
			}
			return e, nil
		}
		if ctx.Err() != nil {
			// The attempt was cut short by the caller, not failed by the
			// registry: it is no outage, and an outage already begun
			// keeps the registry's last answer as its cause.
			return nil, wait.End(errors.Join(err, ctx.Err()))
		}
		s.fetches.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "unavailable")))
		if w := s.waiting.Load(); w == nil {
			if s.waiting.CompareAndSwap(nil, &outage{since: time.Now(), err: err}) {
				s.log.Error("the schema registry cannot give a schema: the events that need it wait, uncommitted; none is dead-lettered for it (check --schema-registry-url, its credentials and TLS files, and that the registry runs)",
					"schema_id", id, "err", err)
			}
		} else {
			s.waiting.Store(&outage{since: w.since, err: err})
			if b.Attempt()%20 == 0 {
				s.log.Warn("still waiting for the schema registry", "schema_id", id, "since", w.since.Format(time.RFC3339), "err", err)
			}
		}
		if !b.Wait() {
			return nil, wait.End(errors.Join(err, ctx.Err()))
		}
	}
}
