package ingest

import (
	"testing"
)

// A chunk comes back empty, without its messages, and is reused; what is
// not a chunk is not kept, and the free list keeps at most freeChunks.
func TestChunksRecycle(t *testing.T) {
	t.Parallel()
	c := newChunks()
	s := c.get()
	if len(s) != 0 || cap(s) != chunkSize {
		t.Fatalf("new chunk: len %d cap %d", len(s), cap(s))
	}
	s = append(s, Fetched{Msg: Message{Value: []byte("x")}}, Fetched{Msg: Message{Value: []byte("y")}})
	c.put(s)
	r := c.get()
	if &r[:1][0] != &s[0] {
		t.Fatal("the chunk given back was not reused")
	}
	if r[:2][0].Msg.Value != nil || r[:2][1].Msg.Value != nil {
		t.Error("a recycled chunk keeps its messages alive")
	}
	c.put(make([]Fetched, 3))
	c.put(nil)
	if len(c.free) != 0 {
		t.Errorf("%d slices that are not chunks kept", len(c.free))
	}
	for range freeChunks + 10 {
		c.put(make([]Fetched, 0, chunkSize))
	}
	if len(c.free) != freeChunks {
		t.Errorf("%d chunks kept, want at most %d", len(c.free), freeChunks)
	}
}
