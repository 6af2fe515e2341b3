package ingest

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/segmentio/kafka-go/compress"
)

// kafka-go decompresses each record batch whole into memory while it reads
// a fetch response, before the worker sees a record, and the broker counts
// compressed bytes: a batch of a few kilobytes on the wire can hold
// gigabytes of zeros. So each codec's reader is wrapped to stop one batch
// from decompressing past batchLimit (the largest fetch budget of the
// process's consumers). Past it, reading the response fails with
// errBatchTooLarge, and the fetcher isolates the partition that holds the
// batch. kafka-go reads compressed data only through this table and offers
// no hook per client, hence the process-wide change; writers are untouched.
var batchLimit atomic.Int64

// refusals counts the batches refused. kafka-go drops the error of a batch
// that follows batches it could read (it returns those), so a fetcher
// learns of a refusal in its round trip from this count.
var refusals atomic.Int64

// errBatchTooLarge is the error of a batch past batchLimit.
var errBatchTooLarge = errors.New("a compressed record batch decompresses to more bytes than the worker may hold")

func init() {
	for i, c := range compress.Codecs {
		if c != nil {
			compress.Codecs[i] = limitedCodec{c}
		}
	}
}

// limitBatches raises the per-batch limit to at least n.
func limitBatches(n int64) {
	for {
		cur := batchLimit.Load()
		if cur >= n || batchLimit.CompareAndSwap(cur, n) {
			return
		}
	}
}

type limitedCodec struct{ compress.Codec }

func (c limitedCodec) NewReader(r io.Reader) io.ReadCloser {
	limit := batchLimit.Load()
	if limit <= 0 {
		return c.Codec.NewReader(r)
	}
	return &limitedReader{rc: c.Codec.NewReader(r), left: limit}
}

// limitedReader reads at most left bytes, and fails if there are more.
type limitedReader struct {
	rc   io.ReadCloser
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		if n, err := l.rc.Read(one[:]); n > 0 {
			refusals.Add(1)
			return 0, errBatchTooLarge
		} else if err != nil {
			return 0, err
		}
		return 0, nil
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.rc.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *limitedReader) Close() error { return l.rc.Close() }

// batchTooLarge describes the refusal for one partition.
func batchTooLarge(topic string, partition int, offset int64) error {
	return fmt.Errorf("partition %d of %s: a compressed record batch at or after offset %d decompresses to more than %d bytes, more than the worker may hold (%w): "+
		"raise --max-inflight-bytes, or skip the batch (kafka-consumer-groups --reset-offsets)", partition, topic, offset, batchLimit.Load(), errBatchTooLarge)
}
