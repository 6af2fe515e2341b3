package waitfor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logs is a log a Watch and a test share.
type logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var places = map[string]string{Bigtable: "Bigtable emulator at 127.0.0.1:9"}

func start(t *testing.T, limit time.Duration) (context.Context, *Watch, *logs) {
	t.Helper()
	l := &logs{}
	ctx, w := Start(context.Background(), limit, Flag, places, slog.New(slog.NewTextHandler(l, nil)))
	t.Cleanup(w.Stop)
	return ctx, w, l
}

// A wait with no answer ends the command at the limit, naming where,
// what, and for how long; it says so meanwhile.
func TestNoAnswerEndsTheCommand(t *testing.T) {
	ctx, w, l := start(t, 2*time.Second)
	begun := time.Now()
	p := Begin(ctx, Bigtable, "admin: create table clicks")
	<-ctx.Done()
	took := time.Since(begun)
	if err := p.End(ctx.Err()); !errors.Is(err, context.Canceled) {
		t.Errorf("End after the watch ended it: %v, want the call's own error", err)
	}
	if took < 2*time.Second || took > 3*time.Second {
		t.Errorf("ended after %s, want 2s to 3s", took)
	}
	var na *NoAnswer
	if !errors.As(context.Cause(ctx), &na) || na != w.Expired() {
		t.Fatalf("cause %v, want the watch's NoAnswer %v", context.Cause(ctx), w.Expired())
	}
	want := "waited 2s for Bigtable emulator at 127.0.0.1:9 (admin: create table clicks) without an answer (--service-timeout 2s)"
	if na.Error() != want {
		t.Errorf("error %q, want %q", na, want)
	}
	if !strings.Contains(l.String(), `msg="waiting for an answer" from="Bigtable emulator at 127.0.0.1:9" for="admin: create table clicks" so_far=1s gives_up_after=2s`) {
		t.Errorf("no line said the wait meanwhile:\n%s", l)
	}
}

// A stream that keeps answering is work, however long it takes; so is a
// run of short waits.
func TestAnswersAreNoWait(t *testing.T) {
	ctx, w, l := start(t, time.Second)
	p := Begin(ctx, Bigtable, "read rows of clicks")
	for range 25 {
		time.Sleep(100 * time.Millisecond)
		p.Pause()
		p.Resume()
		if err := Do(ctx, Bigtable, "admin: read the families of clicks", func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.End(nil); err != nil {
		t.Fatal(err)
	}
	if w.Expired() != nil || ctx.Err() != nil {
		t.Errorf("a stream answering every 100ms for 2.5s ended at a 1s limit: %v", w.Expired())
	}
	if l.String() != "" {
		t.Errorf("said a wait that was none:\n%s", l)
	}
	// Work on an answer is no wait, however long.
	p = Begin(ctx, Bigtable, "read rows of clicks")
	p.Pause()
	time.Sleep(1500 * time.Millisecond)
	p.Resume()
	if w.Expired() != nil {
		t.Fatalf("1.5s of work on a row ended a 1s wait: %v", w.Expired())
	}
	// The same stream, silent after its last answer, ends at the limit.
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a stream silent for 3s did not end at the 1s limit")
	}
	p.End(ctx.Err())
}

// A call that ran out of its own bound names what it waited for; other
// errors pass through as they are, and without a watch nothing changes.
func TestEndNamesTheWait(t *testing.T) {
	ctx, _, _ := start(t, time.Minute)
	for _, err := range []error{context.DeadlineExceeded, status.Error(codes.DeadlineExceeded, "context deadline exceeded"), fmt.Errorf("read: %w", timeoutError{})} {
		p := Begin(ctx, Kafka, "metadata of clicks")
		got := p.End(err)
		var na *NoAnswer
		if !errors.As(got, &na) || !errors.Is(got, err) || !strings.HasPrefix(got.Error(), "waited 0s for Kafka (metadata of clicks) without an answer: ") {
			t.Errorf("End(%v) = %v, want a NoAnswer wrapping it", err, got)
		}
		if outer := Do(ctx, Kafka, "end offsets of clicks", func() error { return got }); outer != got {
			t.Errorf("an outer wait said it again: %v", outer)
		}
	}
	refused := status.Error(codes.Unavailable, "connection refused")
	if got := Begin(ctx, Bigtable, "x").End(refused); got != refused {
		t.Errorf("End(%v) = %v, want it as it is", refused, got)
	}
	p := Begin(context.Background(), Bigtable, "x")
	if p != nil {
		t.Fatalf("Begin without a watch: %v, want nil", p)
	}
	p.Pause()
	p.Resume()
	if got := p.End(context.DeadlineExceeded); got != context.DeadlineExceeded {
		t.Errorf("End without a watch: %v", got)
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// otherKey is a value of another package's in the context.
type otherKey struct{}

// Under worker run, whose context carries no watch, a wait declared on the
// hot path (a batch's write) costs a context lookup and no allocation.
func TestNoWatchAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), otherKey{}, 1))
	defer cancel()
	err := errors.New("refused")
	if n := testing.AllocsPerRun(1000, func() {
		if !Watching(ctx) {
			p := Begin(ctx, Bigtable, "write rows to clicks")
			p.Pause()
			p.Resume()
			_ = p.End(err)
		}
	}); n != 0 {
		t.Errorf("a wait without a watch allocates %.0f times, want 0", n)
	}
}
