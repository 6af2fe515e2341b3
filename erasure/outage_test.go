package erasure

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// A ledger that stops answering for longer than a refresh's deadline
// (Unavailable, which the client retries until then) is loaded again once
// it answers: writes wait while it is stale, and only while.
func TestLedgerLoadsAgainAfterAnOutage(t *testing.T) {
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	s := indexedLedger(t)
	w := NewWatch(s, 200*time.Millisecond, slog.New(slog.DiscardHandler))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	proxy.SetReadRowsFault(s.Table(), status.Error(codes.Unavailable, "injected: the ledger cannot answer"))
	testenv.Eventually(t, 20*time.Second, func() (bool, string) { return w.Held() != nil, "writes not held with the ledger unreadable" })
	time.Sleep(7 * time.Second)
	proxy.SetReadRowsFault("", nil)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		return w.Held() == nil, fmt.Sprintf("writes still held once the ledger answers: %v", w.Held())
	})
}
