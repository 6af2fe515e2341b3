package sink

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
)

// probeKey is a row no event can have: a tenant id is never empty.
const probeKey = "#cellttl-probe"

// probe sends a request without any event's row: a delete in a row that
// does not exist, through the same call, app profile, table and family as
// the writes. It changes no data.
func (w *Writer) probe(ctx context.Context) error {
	m := bigtable.NewMutation()
	m.DeleteCellsInFamily(w.family)
	timeout := 10 * time.Second
	if w.cfg.AttemptTimeout > 0 {
		timeout = min(timeout, w.cfg.AttemptTimeout)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs, err := w.table.ApplyBulk(pctx, []string{probeKey}, []*bigtable.Mutation{m})
	if err != nil {
		return err
	}
	if len(errs) > 0 && errs[0] != nil {
		return errs[0]
	}
	return nil
}

// failing records a failure every row of an attempt shared. The first one
// of an outage is logged as an error with what usually fixes it.
// RESOURCE_EXHAUSTED is Bigtable's flow control, which the Throttle
// answers: an outage only once nothing went through for
// ThrottledOutageAfter (a cluster out of storage or quota), so that
// ordinary throttling turns no pod unready and pages no one.
func (w *Writer) failing(code codes.Code, err error) {
	w.mu.Lock()
	if code == codes.ResourceExhausted && w.outageSince.IsZero() {
		// A run of refusals: one a minute apart or more starts a new one
		// (a write that ended with its context did not clear the last).
		now := w.cfg.Now()
		if w.throttledSince.IsZero() || now.Sub(w.throttledLast) > w.cfg.ThrottledOutageAfter {
			w.throttledSince = now
		}
		w.throttledLast = now
		if now.Sub(w.throttledSince) < w.cfg.ThrottledOutageAfter {
			w.mu.Unlock()
			return
		}
	}
	first := w.outageSince.IsZero()
	if first {
		w.outageSince = w.cfg.Now()
	}
	w.outageCode, w.outageErr = code, err
	w.mu.Unlock()
	if first {
		w.log.Error("bigtable refuses every write; events wait, uncommitted, and are retried", "table", w.tableName,
			"code", code.String(), "fix", fixFor(code), "err", err)
	}
}

func (w *Writer) recovered() {
	w.mu.Lock()
	since := w.outageSince
	w.outageSince, w.outageErr, w.throttledSince = time.Time{}, nil, time.Time{}
	w.mu.Unlock()
	if !since.IsZero() {
		w.log.Info("bigtable takes writes again", "table", w.tableName, "after", w.cfg.Now().Sub(since).Round(time.Millisecond))
	}
}

// readinessKey is a row no event can have ('#' is not allowed in a tenant
// id).
const readinessKey = "#readiness-probe"

// Reachable reads one row of the table, a point read of a key no event can
// have: cheap, and it fails when Bigtable is unreachable. Reads can pass
// while every write is refused: see Outage.
func (w *Writer) Reachable(ctx context.Context) error {
	if _, err := w.table.ReadRow(ctx, readinessKey); err != nil {
		return fmt.Errorf("bigtable read: %w", err)
	}
	return nil
}

// Outage returns why writes fail as a whole, nil while they go through.
func (w *Writer) Outage() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.outageSince.IsZero() {
		return nil
	}
	return fmt.Errorf("bigtable writes to %s failing since %s (%s): %v; %s", w.tableName,
		w.outageSince.UTC().Format(time.RFC3339), w.outageCode, w.outageErr, fixFor(w.outageCode))
}

// fixFor says what usually ends a failure every write shares.
func fixFor(code codes.Code) string {
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return "every request is refused whole: check --app-profile (it must route writes to this instance's clusters) and the table's state"
	case codes.PermissionDenied, codes.Unauthenticated:
		return "grant the worker's credentials bigtable.tables.mutateRows on the table (roles/bigtable.user)"
	case codes.NotFound:
		return "the table or its family is missing: run `worker setup`"
	case codes.ResourceExhausted:
		return "Bigtable is throttling: add nodes or lower --writers"
	}
	return "retrying until Bigtable answers"
}
