package sink_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// The watch holds writes while the rule disagrees and lets them go when
// it agrees again; when the rule cannot be read for three intervals,
// writes go on under the rule read last, and Problem says so.
func TestRuleWatch(t *testing.T) {
	bt, err := inproc.StartBigtable(inproc.BigtableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("BIGTABLE_EMULATOR_HOST", bt.Addr())
	dc, ac := testenv.Clients(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, 48*time.Hour))
	w := sink.NewRuleWatch(ac, tgt, 48*time.Hour, "the fix", slog.New(slog.DiscardHandler))
	ctx := context.Background()
	if err := w.Check(ctx); err != nil || w.Held() != nil || w.Problem() != nil {
		t.Fatalf("agreeing rule: %v, held %v, problem %v", err, w.Held(), w.Problem())
	}
	if err := ac.SetGCPolicy(ctx, tgt.Table, tgt.Family, bigtable.MaxAgePolicy(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(ctx); err != nil || w.Held() == nil || !strings.Contains(w.Held().Error(), `"max-age 1h", the configuration needs "max-age 2d"; the fix`) {
		t.Fatalf("another rule: %v, held %v", err, w.Held())
	}
	if err := ac.SetGCPolicy(ctx, tgt.Table, tgt.Family, bigtable.MaxAgePolicy(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(ctx); err != nil || w.Held() != nil {
		t.Fatalf("the rule set back: %v, held %v", err, w.Held())
	}

	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(rctx, 50*time.Millisecond)
	bt.Close()
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		p := w.Problem()
		return p != nil && strings.Contains(p.Error(), "has not been read for"), "no problem with the emulator gone"
	})
	if w.Held() != nil {
		t.Errorf("writes held for a rule that could not be read: %v", w.Held())
	}
}
