// Package waitfor bounds how long a command that runs to its end (worker
// setup, read, audit, retime...) waits for an answer from a service, and
// says what it waits for while it waits.
//
// The command starts a Watch, whose context it hands down. The packages
// that call Bigtable, Kafka or the schema registry declare each wait on the
// context they are given: Begin before the call, End after, and Pause and
// Resume around the work on each answer of a stream (a row read). A wait
// with no answer for the Watch's limit ends the command: the Watch cancels
// its context, with a NoAnswer that names the service, where it is, what
// was asked and for how long. A scan that keeps returning rows is
// answering; a wait the command makes on purpose (a pause between passes,
// a rate) is no wait for a service and is not declared.
//
// Under worker run, whose context carries no Watch, Begin is one context
// lookup and returns nil, which Pause, Resume and End accept, with no
// allocation: a batch's write (btwait) pays nothing else. Declarations off
// the hot path may build their words before the lookup.
package waitfor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The services a wait is for: the keys of the places a Watch knows.
const (
	Bigtable = "Bigtable"
	Kafka    = "Kafka"
	Registry = "the schema registry"
)

// Wait is one wait for a service: where it is ("Bigtable emulator at
// 127.0.0.1:8086") and what was asked ("admin: create table clicks").
type Wait struct {
	Place, What string
}

func (w Wait) String() string {
	if w.What == "" {
		return w.Place
	}
	return w.Place + " (" + w.What + ")"
}

// NoAnswer is the error of a wait that had no answer: for the Watch's
// limit (Flag names it), or until a bound of the caller's own ran out
// (Err is then the client's error).
type NoAnswer struct {
	Wait  Wait
	After time.Duration
	Flag  string
	Err   error
}

func (e *NoAnswer) Error() string {
	msg := fmt.Sprintf("waited %s for %s without an answer", seconds(e.After), e.Wait)
	if e.Flag != "" {
		msg += fmt.Sprintf(" (%s %s)", e.Flag, seconds(e.After))
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *NoAnswer) Unwrap() error { return e.Err }

// seconds writes d as people read a wait: 30s, 1m0s, 250ms.
func seconds(d time.Duration) string {
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// Watch bounds the waits of one command.
type Watch struct {
	limit  time.Duration
	flag   string
	log    *slog.Logger
	places map[string]string
	cancel context.CancelCauseFunc
	// firstReport and reportEvery space the lines that say a wait goes on.
	firstReport, reportEvery time.Duration

	mu      sync.Mutex
	pending map[*Pending]struct{}
	expired *NoAnswer
	stop    chan struct{}
	stopped sync.WaitGroup
}

type key struct{}

// Start returns a context whose waits w bounds to limit, and w. places
// name where each service is (Bigtable: "Bigtable emulator at ..."); flag
// is the flag that sets limit, for the error. Stop w when the command ends.
func Start(ctx context.Context, limit time.Duration, flag string, places map[string]string, log *slog.Logger) (context.Context, *Watch) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watch{limit: limit, flag: flag, log: log, places: places, pending: map[*Pending]struct{}{}, stop: make(chan struct{}),
		firstReport: min(5*time.Second, limit/2), reportEvery: min(10*time.Second, limit/2)}
	ctx, w.cancel = context.WithCancelCause(ctx)
	ctx = context.WithValue(ctx, key{}, w)
	// A tick of a tenth of the limit, within [50ms, 1s]: a wait ends at
	// most that long after its limit.
	tick := min(max(limit/10, 50*time.Millisecond), time.Second)
	w.stopped.Add(1)
	go w.run(tick)
	return ctx, w
}

// Stop ends the watch and releases its context.
func (w *Watch) Stop() {
	close(w.stop)
	w.stopped.Wait()
	w.cancel(context.Canceled)
}

// Expired is the wait that ended the command, nil when none did.
func (w *Watch) Expired() *NoAnswer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.expired
}

func (w *Watch) run(tick time.Duration) {
	defer w.stopped.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			if w.check(now) {
				return
			}
		}
	}
}

// check looks at every wait in progress: it says the long ones, and ends
// the command at the first past the limit (true then).
func (w *Watch) check(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.pending {
		if n := p.answers.Load(); n != p.seen || p.paused.Load() {
			p.seen, p.since, p.next = n, now, w.firstReport
		}
		age := now.Sub(p.since)
		if age >= w.limit {
			w.expired = &NoAnswer{Wait: p.wait, After: w.limit, Flag: w.flag}
			w.cancel(w.expired)
			return true
		}
		if age >= p.next {
			w.log.Warn("waiting for an answer", "from", p.wait.Place, "for", p.wait.What,
				"so_far", age.Truncate(time.Second).String(), "gives_up_after", w.limit.String())
			p.next += w.reportEvery
		}
	}
	return false
}

// Pending is a wait in progress. A nil Pending (no Watch) does nothing.
type Pending struct {
	w    *Watch
	wait Wait
	// answers counts the stream's answers (Pause, Resume); the Watch
	// notes when it last saw the count move (seen, since) under its lock.
	// paused is set while the caller works on an answer.
	answers atomic.Int64
	paused  atomic.Bool
	seen    int64
	since   time.Time
	next    time.Duration
}

// Watching reports whether ctx's command bounds its waits: a caller that
// must build what it asks for (a string) can skip it when not.
func Watching(ctx context.Context) bool {
	_, ok := ctx.Value(key{}).(*Watch)
	return ok
}

// Begin declares a wait for service (where the command's Watch says it
// is), asking what, when ctx's command has a Watch; nil otherwise.
func Begin(ctx context.Context, service, what string) *Pending {
	w, _ := ctx.Value(key{}).(*Watch)
	if w == nil {
		return nil
	}
	place := w.places[service]
	if place == "" {
		place = service
	}
	return w.begin(place, what)
}

// BeginAt is Begin for a wait whose caller knows the place itself (the
// broker it asks).
func BeginAt(ctx context.Context, place, what string) *Pending {
	w, _ := ctx.Value(key{}).(*Watch)
	if w == nil {
		return nil
	}
	return w.begin(place, what)
}

func (w *Watch) begin(place, what string) *Pending {
	p := &Pending{w: w, wait: Wait{Place: place, What: what}, since: time.Now(), next: w.firstReport}
	w.mu.Lock()
	w.pending[p] = struct{}{}
	w.mu.Unlock()
	return p
}

// Pause notes an answer of a stream (a row read), which the caller now
// works on: the wait stands still until Resume, where it starts over. The
// caller's own waits meanwhile (a write for the row) are waits of their
// own, and name what they wait for.
func (p *Pending) Pause() {
	if p != nil {
		p.answers.Add(1)
		p.paused.Store(true)
	}
}

// Resume notes that the caller waits for the stream again.
func (p *Pending) Resume() {
	if p != nil {
		p.paused.Store(false)
		p.answers.Add(1)
	}
}

// End ends the wait with the call's error, and returns it: as a NoAnswer
// wrapping it when the call ran out of a bound of the caller's own (a
// context deadline, a client's timeout), so that the command's error names
// what it waited for.
func (p *Pending) End(err error) error {
	if p == nil {
		return err
	}
	p.w.mu.Lock()
	delete(p.w.pending, p)
	since := p.since
	if p.answers.Load() != p.seen || p.paused.Load() {
		since = time.Now()
	}
	p.w.mu.Unlock()
	if err == nil || !timedOut(err) {
		return err
	}
	var na *NoAnswer
	if errors.As(err, &na) {
		return err // an inner wait said it
	}
	return &NoAnswer{Wait: p.wait, After: time.Since(since), Err: err}
}

// timedOut reports whether err is a bound running out: a context's
// deadline, gRPC's DeadlineExceeded, a network timeout.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded ||
		errors.As(err, &ne) && ne.Timeout()
}

// Do runs call as one wait for service, asking what.
func Do(ctx context.Context, service, what string, call func() error) error {
	p := Begin(ctx, service, what)
	return p.End(call())
}
