package sink

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What may leave for Bigtable, and when: the writes held (WriterConfig.Held),
// the rows the erasure gate withdraws, and the pace of the Throttle. Write
// and send ask these right before each request.

// admit returns the rows at pending that may be sent now: none while the
// writes are held (its error), and not those the gate withdraws (see
// withdraw).
func (w *Writer) admit(ctx context.Context, rows []Row, pending []int, results []error) ([]int, error) {
	if w.cfg.Held != nil {
		if err := w.cfg.Held(); err != nil {
			return pending, err
		}
	}
	if w.cfg.Gate == nil {
		return pending, nil
	}
	return w.withdraw(ctx, rows, pending, results, w.cfg.Gate.Generation())
}

// withdraw asks the gate about the rows at pending decided under a
// generation older than gen, records ErrWithdrawn for those it refuses,
// and returns the rest. With the generation unchanged it only compares
// numbers. A gate that cannot tell ends the pass: the rows not yet asked
// about stay pending, as they were.
func (w *Writer) withdraw(ctx context.Context, rows []Row, pending []int, results []error, gen uint64) ([]int, error) {
	kept := pending[:0]
	for j, i := range pending {
		r := &rows[i]
		if r.Gen < gen {
			ok, err := w.cfg.Gate.Admits(ctx, r.Key, r.Source)
			if err != nil {
				// kept is no longer than j: append moves the rest down.
				return append(kept, pending[j:]...), fmt.Errorf("recheck a row's user against the erasure ledger: %w", err)
			}
			if !ok {
				results[i] = ErrWithdrawn
				continue
			}
			r.Gen = gen
		}
		kept = append(kept, i)
	}
	return kept, nil
}

// held is a write that waits: nothing was sent (see WriterConfig.Held).
type held struct{ err error }

func (h *held) Error() string { return h.err.Error() }

// pace waits until the throttle, when there is one, lets rows be sent;
// its error is ctx's.
func (w *Writer) pace(ctx context.Context, rows int) error {
	if t := w.cfg.Throttle; t != nil {
		return t.Wait(ctx, rows)
	}
	return nil
}

// exhausted reports whether Bigtable throttled a request: the request, or
// one of its rows, refused with RESOURCE_EXHAUSTED.
func exhausted(err error, rowErrs []error) bool {
	if status.Code(err) == codes.ResourceExhausted {
		return true
	}
	for _, e := range rowErrs {
		if e != nil && status.Code(e) == codes.ResourceExhausted {
			return true
		}
	}
	return false
}
