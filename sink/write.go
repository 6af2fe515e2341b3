package sink

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// write is one call of Writer.Write: its rows, what became of each
// (results: nil, a *RowError or ErrWithdrawn; unset while pending), and
// the evidence of its current attempt. Its methods are the steps a row
// goes through on its way to Bigtable: admit (and withdraw), attempt,
// send, settle and isolate; at the end, withdrawRefused. Each takes the
// indexes of the rows it works on and returns those left.
type write struct {
	w       *Writer
	rows    []Row
	results []error
	ev      *evidence
}

// What may leave for Bigtable, and when: the writes held (WriterConfig.Held),
// the rows the erasure gate withdraws, and the pace of the Throttle. Write
// and send ask these right before each request.

// admit returns the rows at pending that may be sent now: none while the
// writes are held (its error), and not those the gate withdraws (see
// withdraw).
func (wr *write) admit(ctx context.Context, pending []int) ([]int, error) {
	w := wr.w
	if w.cfg.Held != nil {
		if err := w.cfg.Held(); err != nil {
			return pending, err
		}
	}
	if w.cfg.Gate == nil {
		return pending, nil
	}
	return wr.withdraw(ctx, pending, w.cfg.Gate.Generation())
}

// withdraw asks the gate about the rows at pending decided under a
// generation older than gen, records ErrWithdrawn for those it refuses,
// and returns the rest. With the generation unchanged it only compares
// numbers. A gate that cannot tell ends the pass: the rows not yet asked
// about stay pending, as they were.
func (wr *write) withdraw(ctx context.Context, pending []int, gen uint64) ([]int, error) {
	w := wr.w
	kept := pending[:0]
	for j, i := range pending {
		r := &wr.rows[i]
		if r.Gen < gen {
			ok, err := w.cfg.Gate.Admits(ctx, r.Key, r.Source)
			if err != nil {
				// kept is no longer than j: append moves the rest down.
				return append(kept, pending[j:]...), fmt.Errorf("recheck a row's user against the erasure ledger: %w", err)
			}
			if !ok {
				wr.results[i] = ErrWithdrawn
				continue
			}
			r.Gen = gen
		}
		kept = append(kept, i)
	}
	return kept, nil
}

// withdrawRefused asks the gate about the rows Bigtable refused for good,
// which the caller would set aside as dead letters, copies of their
// users' data: a row whose user was erased since it was decided is
// withdrawn instead (ErrWithdrawn), settled unwritten at once rather than
// waiting for the dead-letter topic. A gate that cannot tell leaves the
// rest refused: the dead-letter writer judges each letter again.
func (wr *write) withdrawRefused(ctx context.Context) {
	g := wr.w.cfg.Gate
	if g == nil {
		return
	}
	var refused []int
	for i, r := range wr.results {
		if _, ok := r.(*RowError); ok {
			refused = append(refused, i)
		}
	}
	if len(refused) > 0 {
		_, _ = wr.withdraw(ctx, refused, g.Generation())
	}
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

// evidence answers, at most once per attempt, whether Bigtable accepts a
// request without the rows at hand: the control that tells a row's own
// refusal from one every request gets.
type evidence struct {
	w       *Writer
	ctx     context.Context
	probed  bool
	accepts bool
}

func (e *evidence) othersAccepted() bool {
	if !e.probed {
		e.probed = true
		e.accepts = e.w.probe(e.ctx) == nil
	}
	return e.accepts
}

// attempt makes one ApplyBulk call for the rows at pending, already
// paced, records the rows withdrawn or rejected for good in results, and
// says what is left to retry.
func (wr *write) attempt(ctx context.Context, pending []int) outcome {
	wr.ev = &evidence{w: wr.w, ctx: ctx}
	sent, rowErrs, err := wr.send(ctx, pending, false)
	var h *held
	switch {
	case errors.As(err, &h):
		return outcome{retry: sent, held: h.err}
	case len(sent) == 0:
		return outcome{}
	case err != nil:
		code := status.Code(err)
		if aboutContent(code) && ctx.Err() == nil && wr.ev.othersAccepted() {
			// Refused whole, but Bigtable takes other requests: a row of
			// this one is at fault. Split the request to find it.
			return wr.isolate(ctx, sent, code, err)
		}
		return outcome{retry: sent, code: code, err: err, whole: true}
	}
	return wr.settle(sent, rowErrs)
}

// send makes one ApplyBulk call for the rows at pending, first paced when
// paced (the halves of a split request: each sends its rows again), then
// admitted (admit) right before it leaves: the ledger may have changed or
// gone stale while the request waited for the rate or behind the other
// halves. It returns the rows it sent (or, with a *held error, the rows
// it held back), and their results.
func (wr *write) send(ctx context.Context, pending []int, paced bool) ([]int, []error, error) {
	w := wr.w
	if paced {
		if err := w.pace(ctx, len(pending)); err != nil {
			// Wait ends only with ctx: the request was never sent.
			code := codes.Canceled
			if errors.Is(err, context.DeadlineExceeded) {
				code = codes.DeadlineExceeded
			}
			return pending, nil, status.Error(code, err.Error())
		}
	}
	sent, err := wr.admit(ctx, pending)
	if err != nil {
		return sent, nil, &held{err}
	}
	if len(sent) == 0 {
		return nil, nil, nil
	}
	rowErrs, err := w.apply(ctx, wr.rows, sent)
	if t := w.cfg.Throttle; t != nil {
		t.Sent(len(sent), exhausted(err, rowErrs))
	}
	return sent, rowErrs, err
}

// settle sorts the per-row results of a request that Bigtable took.
func (wr *write) settle(pending []int, rowErrs []error) outcome {
	var out outcome
	var refused []int
	for j := range pending {
		var rerr error
		if rowErrs != nil {
			rerr = rowErrs[j]
		}
		switch {
		case rerr == nil:
			out.wrote = true
		case aboutContent(status.Code(rerr)):
			refused = append(refused, j)
		default:
			out.retry = append(out.retry, pending[j])
			out.code, out.err = status.Code(rerr), rerr
		}
	}
	if len(refused) > 0 {
		if out.wrote || wr.ev.othersAccepted() {
			for _, j := range refused {
				wr.results[pending[j]] = &RowError{Code: status.Code(rowErrs[j]), Err: rowErrs[j]}
			}
		} else {
			// Every row refused, and a request without them fails too.
			for _, j := range refused {
				out.retry = append(out.retry, pending[j])
				out.code, out.err = status.Code(rowErrs[j]), rowErrs[j]
			}
		}
	}
	out.whole = !out.wrote && len(out.retry) == len(pending)
	return out
}

// isolate splits a request that Bigtable refused as a whole, while it takes
// requests without these rows, until each refusal falls on one row.
func (wr *write) isolate(ctx context.Context, pending []int, code codes.Code, err error) outcome {
	w := wr.w
	if len(pending) == 1 {
		// The evidence may be older than this refusal: an outage that
		// began while the request was being split would look like this
		// row's fault. Ask again before blaming it.
		if perr := w.probe(ctx); perr != nil {
			return outcome{retry: pending, code: code, err: err}
		}
		wr.results[pending[0]] = &RowError{Code: code, Err: err}
		return outcome{}
	}
	var out outcome
	h := len(pending) / 2
	for _, part := range [][]int{pending[:h], pending[h:]} {
		sent, rowErrs, perr := wr.send(ctx, part, true)
		var sub outcome
		var h *held
		switch pcode := status.Code(perr); {
		case errors.As(perr, &h):
			sub = outcome{retry: sent, held: h.err}
		case len(sent) == 0:
		case perr == nil:
			sub = wr.settle(sent, rowErrs)
		case aboutContent(pcode) && ctx.Err() == nil:
			sub = wr.isolate(ctx, sent, pcode, perr)
		default:
			sub = outcome{retry: sent, code: pcode, err: perr}
		}
		out.retry = append(out.retry, sub.retry...)
		out.wrote = out.wrote || sub.wrote
		if sub.held != nil {
			out.held = sub.held
		}
		if sub.err != nil {
			out.code, out.err = sub.code, sub.err
		}
	}
	return out
}
