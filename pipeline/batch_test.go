package pipeline

import (
	"testing"
	"time"

	"github.com/cellttl/cellttl/sink"
)

func TestBatchPolicyReasons(t *testing.T) {
	now := time.Unix(1000, 0)
	cfg := Config{FlushRows: 3, FlushBytes: 10, FlushInterval: time.Second}
	it := func(version string, size int) item {
		return item{row: sink.Row{Value: make([]byte, size)}, version: version}
	}
	p := newBatchPolicy(cfg)
	p.now = func() time.Time { return now }
	if _, ok := p.UntilNext(now); ok {
		t.Error("an empty batch has an age")
	}
	for i, want := range []bool{false, false, true} {
		if due, reason := p.Add(it("v1", 1)); due != want || (due && reason != flushRows) {
			t.Errorf("row %d: due %t (%s), want %t by rows", i+1, due, reason, want)
		}
	}
	if b := p.Flush(); len(b.items) != 3 || b.bytes != 3 || b.version != "v1" || !p.Empty() {
		t.Errorf("flushed %d items, %d bytes, version %q", len(b.items), b.bytes, b.version)
	}
	if due, reason := p.Add(it("v1", 10)); !due || reason != flushBytes {
		t.Errorf("10 bytes: due %t (%s), want due by bytes", due, reason)
	}
	p.Flush()
	p.Add(it("v1", 1))
	if wait, ok := p.UntilNext(now.Add(400 * time.Millisecond)); !ok || wait != 600*time.Millisecond {
		t.Errorf("until next: %s %t, want 600ms", wait, ok)
	}
	if x := it("v2", 1); p.Fits(&x) {
		t.Error("an item of another config version fits the batch")
	}
	if x := it("v1", 1); !p.Fits(&x) {
		t.Error("an item of the batch's version does not fit")
	}
}
