package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cellttl/cellttl/admin"
)

// readinessChecks: in the consumer group, Bigtable answering and taking
// writes, the dead-letter topic taking dead letters, a config loaded.
func (w *worker) readinessChecks() []admin.Check {
	return []admin.Check{
		{Name: "kafka", Fn: func(context.Context) error { return errors.Join(w.consumer.Ready(), w.times.Problem()) }},
		{Name: "bigtable", Fn: func(ctx context.Context) error {
			if err := w.writer.Reachable(ctx); err != nil {
				return err
			}
			// Reads can pass while every write is refused (an app profile
			// that routes nowhere, missing write permission), or held (the
			// family's GC rule changed under the worker).
			// And the ledger answering the lookups that records of erased
			// users held compact wait for.
			return errors.Join(w.rules.Problem(), w.writer.Outage(), w.erasures.Held(), w.erasures.Problem())
		}},
		{Name: "dead-letter", Fn: func(context.Context) error { return w.dlq.Problem() }},
		{Name: "schema-registry", Fn: func(ctx context.Context) error {
			if w.schemas == nil {
				return nil
			}
			return errors.Join(w.schemas.Check(ctx), w.schemas.Problem())
		}},
		{Name: "config", Fn: func(context.Context) error {
			if w.reloader.Current() == nil {
				return errors.New("no tenants config loaded")
			}
			return nil
		}},
	}
}

// lastError remembers the latest error of a kind, for /status.
type lastError struct {
	mu  sync.Mutex
	err string
	at  time.Time
}

func (l *lastError) set(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	l.err, l.at = err.Error(), time.Now()
	l.mu.Unlock()
}

func (l *lastError) get() (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err, l.at
}
