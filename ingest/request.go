package ingest

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/segmentio/kafka-go/protocol"
	fetchAPI "github.com/segmentio/kafka-go/protocol/fetch"

	"github.com/cellttl/cellttl/ingest/kwire"
)

// The fetcher reads Fetch responses itself. kafka-go would decode a whole
// response before returning it, decompressing every record batch in full
// into memory: a response of many small batches, each a few kilobytes of
// zstd on the wire, could hold gigabytes. So a fetch request is sent through
// the Transport (its connection, TLS, SASL and routing to the leader), but
// its response is read as bytes, by RawExchange, and its batches are walked
// and decompressed one at a time, as streams, by the fetcher (read.go, with
// package kwire).

// fetchRequest is a Fetch request whose response is read as bytes.
type fetchRequest struct {
	*fetchAPI.Request
	version int16
	// buf, when large enough, holds the response: a buffer of an earlier
	// response, reused.
	buf []byte
}

// correlations numbers the requests the fetcher sends itself.
var correlations atomic.Int32

// Required is called on the connection with the versions it negotiated:
// the response is always read here. A kafka-go that negotiates a Fetch
// version newer than kwire reads is held to the newest kwire reads, which
// every broker that speaks the newer one speaks too.
func (r *fetchRequest) Required(versions map[protocol.ApiKey]int16) bool {
	r.version = min(versions[protocol.Fetch], kwire.MaxFetchVersion)
	return true
}

// RawExchange writes the request and reads its whole response, then parses
// its frame: topics and partitions, each partition's records left as bytes.
func (r *fetchRequest) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	if r.version < kwire.MinFetchVersion {
		return nil, fmt.Errorf("the broker speaks Fetch v%d; cellttl needs v%d or later (Kafka 0.11+)", r.version, kwire.MinFetchVersion)
	}
	id := correlations.Add(1)
	if err := protocol.WriteRequest(rw, r.version, id, "cellttl", r.Request); err != nil {
		return nil, fmt.Errorf("write fetch request: %w", err)
	}
	res, err := kwire.ReadFetchResponse(rw, r.version, id, r.buf)
	if err != nil {
		return nil, err
	}
	return &fetchResponse{res}, nil
}

// fetchResponse is a Fetch response as read from the wire.
type fetchResponse struct{ *kwire.FetchResponse }

// ApiKey makes it a protocol.Message.
func (*fetchResponse) ApiKey() protocol.ApiKey { return protocol.Fetch }
