package sink

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cellttl/cellttl/rowkey"
)

// BenchmarkMutation is the per-row cost of turning a row into the Bigtable
// client's mutation: the part of the hot path the client library owns.
func BenchmarkMutation(b *testing.B) {
	w := &Writer{family: "c"}
	r := Row{Key: "acme#80ef#u-42#1795268648987#e-123456", Timestamp: 1795098712123000, Value: make([]byte, 300), WrittenAt: true}
	var at [8]byte
	binary.BigEndian.PutUint64(at[:], 1795268648987000)
	b.ReportAllocs()
	for b.Loop() {
		_ = w.mutation(&r, at[:], nil)
	}
}

// BenchmarkMutationWithTTL is BenchmarkMutation for an event that gave its
// own TTL: one cell more.
func BenchmarkMutationWithTTL(b *testing.B) {
	w := &Writer{family: "c"}
	r := Row{Key: "acme#80ef#u-42#1795268648987#e-123456", Timestamp: 1795098712123000, Value: make([]byte, 300), WrittenAt: true}
	var at [8]byte
	binary.BigEndian.PutUint64(at[:], 1795268648987000)
	ttl := rowkey.AppendTTL(nil, time.Hour, 2*time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		_ = w.mutation(&r, at[:], ttl)
	}
}
