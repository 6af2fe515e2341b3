package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

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

// registerShortfalls reports the stores whose settings let a copy outlive
// its tenant's TTL, read at collection time: the input topic while
// producers may stamp records beyond --max-clock-skew (a record stamped
// ahead keeps its segment, and the events before it), and each
// dead-letter topic whose records are not stamped by the broker
// (LogAppendTime): one letter stamped ahead freezes its partition.
// Settings not read yet, that the broker does not give, unread at a dead-
// letter topic's last check, or unread for StaleAfter checks of the input
// topic's count as short: a store nobody can vouch for is not called
// bounded. /status says which, and the log the fix.
func (w *worker) registerShortfalls(m metric.Meter) error {
	g, err := m.Int64ObservableGauge("cellttl.retention.shortfalls", metric.WithUnit("{store}"),
		metric.WithDescription("stores whose settings let a copy outlive its tenant's TTL, by store: input_topic (producers may stamp records beyond --max-clock-skew), dead_letter_topic (records not stamped LogAppendTime); settings not read count as short; /status record_timestamps and dead_letter_topics say which and the fix"))
	if err != nil {
		return fmt.Errorf("register retention metric: %w", err)
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var input, letters int64
		if !w.times.Vouches() {
			input = 1
		}
		for _, r := range w.dlq.Topics() {
			if r.Unread() || r.Stamping.Type != "LogAppendTime" {
				letters++
			}
		}
		o.ObserveInt64(g, input, metric.WithAttributes(attribute.String("store", "input_topic")))
		o.ObserveInt64(g, letters, metric.WithAttributes(attribute.String("store", "dead_letter_topic")))
		return nil
	}, g)
	if err != nil {
		return fmt.Errorf("register retention metric: %w", err)
	}
	return nil
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
