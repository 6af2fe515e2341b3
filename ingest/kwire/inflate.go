package kwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// The codecs of a record batch's attributes (its lowest three bits).
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLz4    = 3
	codecZstd   = 4
)

func codecName(c int8) string {
	switch c {
	case codecNone:
		return "none"
	case codecGzip:
		return "gzip"
	case codecSnappy:
		return "snappy"
	case codecLz4:
		return "lz4"
	case codecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec %d", c)
}

// inflateWindow bounds the memory a decompressor may use for history or
// one block, whatever the batch claims: zstd's window (producers at every
// standard level use at most 8 MiB; levels 20-22 with --ultra more), one
// snappy block, lz4's largest block (4 MiB). A batch that needs more is
// not decompressed: it is handed on as an undecodable batch.
const inflateWindow = 8 << 20

// errBatchTooLarge is what reading a batch past its bounds returns.
var errBatchTooLarge = errors.New("too large to decompress")

// inflater decompresses record batches, one at a time, as streams: the
// memory it holds is its decompressors' windows, never a whole batch, so a
// batch of a few kilobytes on the wire that holds gigabytes of zeros costs
// time, not memory. The time is bounded too: a batch may decompress to at
// most limit bytes. The decompressors are kept and reused; an inflater
// belongs to one goroutine.
type inflater struct {
	limit int64

	zstd   *zstd.Decoder
	gzip   *gzip.Reader
	lz4    *lz4.Reader
	snappy snappyReader
	// bounded is the reader open returns, counting what the decompressor
	// gives against limit.
	bounded boundedReader
}

func newInflater(limit int64) *inflater { return &inflater{limit: limit} }

// open returns the decompressed stream of src, compressed with codec, which
// fails with errBatchTooLarge past the limit. The stream is valid until the
// next open.
func (f *inflater) open(codec int8, src []byte) (io.Reader, error) {
	var r io.Reader
	switch codec {
	case codecGzip:
		if f.gzip == nil {
			f.gzip = new(gzip.Reader)
		}
		if err := f.gzip.Reset(bytes.NewReader(src)); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		r = f.gzip
	case codecSnappy:
		f.snappy.reset(src)
		r = &f.snappy
	case codecLz4:
		if f.lz4 == nil {
			f.lz4 = lz4.NewReader(nil)
		}
		f.lz4.Reset(bytes.NewReader(src))
		r = f.lz4
	case codecZstd:
		if f.zstd == nil {
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(inflateWindow), zstd.WithDecoderMaxMemory(inflateWindow))
			if err != nil {
				return nil, fmt.Errorf("zstd: %w", err)
			}
			f.zstd = d
		}
		if err := f.zstd.Reset(bytes.NewReader(src)); err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		r = f.zstd
	default:
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
	f.bounded = boundedReader{r: r, left: f.limit, limit: f.limit}
	return &f.bounded, nil
}

// close lets go of the decompressors' hold on the last source.
func (f *inflater) close() {
	if f.zstd != nil {
		f.zstd.Close()
	}
}

// boundedReader reads at most left bytes, and fails with errBatchTooLarge
// when there are more.
type boundedReader struct {
	r           io.Reader
	left, limit int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := io.ReadFull(b.r, one[:]); n > 0 {
			return 0, fmt.Errorf("it decompresses to more than %d bytes, the most one batch may (the fetch budget, of --max-inflight-bytes): %w", b.limit, errBatchTooLarge)
		} else if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, io.EOF
		} else if err != nil {
			return 0, err
		}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// xerialMagic starts snappy data in the framing of the Java client's
// snappy-java (a 16-byte header, then blocks each after its 4-byte length);
// without it the data is one raw snappy block, as librdkafka writes it.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// snappyReader decodes snappy data a block at a time into one buffer it
// reuses. A block's decoded length is checked against inflateWindow before
// anything is allocated: a snappy header may claim up to 4 GiB.
type snappyReader struct {
	src    []byte // what is left to decode
	framed bool
	out    []byte // the current block, decoded
	pos    int    // of out, read so far
	buf    []byte
}

func (s *snappyReader) reset(src []byte) {
	s.out, s.pos = nil, 0
	s.framed = len(src) >= 16 && bytes.Equal(src[:8], xerialMagic)
	if s.framed {
		src = src[16:]
	}
	s.src = src
}

func (s *snappyReader) Read(p []byte) (int, error) {
	for s.pos == len(s.out) {
		if len(s.src) == 0 {
			return 0, io.EOF
		}
		if err := s.block(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.out[s.pos:])
	s.pos += n
	return n, nil
}

// block decodes the next block.
func (s *snappyReader) block() error {
	block := s.src
	if s.framed {
		if len(s.src) < 4 {
			return errors.New("snappy: truncated block length")
		}
		n := binary.BigEndian.Uint32(s.src)
		if uint64(n) > uint64(len(s.src)-4) {
			return fmt.Errorf("snappy: block of %d bytes in %d", n, len(s.src)-4)
		}
		block, s.src = s.src[4:4+n], s.src[4+n:]
	} else {
		s.src = nil
	}
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return fmt.Errorf("snappy: %w", err)
	}
	if n > inflateWindow {
		return fmt.Errorf("a snappy block of %d bytes, more than the %d a block may: %w", n, inflateWindow, errBatchTooLarge)
	}
	if cap(s.buf) < n {
		s.buf = make([]byte, n)
	}
	if s.out, err = snappy.Decode(s.buf[:n], block); err != nil {
		return fmt.Errorf("snappy: %w", err)
	}
	s.pos = 0
	return nil
}
