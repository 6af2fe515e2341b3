package ingest

// chunkSize is how many messages a chunk holds: fetch responses are read
// into chunks and handed on a chunk at a time.
const chunkSize = 512

// freeChunks is how many emptied chunks are kept for reuse (700 KiB, part
// of the worker's memory overhead beyond its byte budget): enough to cover
// the chunks between the pipeline's putting back and the fetcher's taking.
const freeChunks = 8

// chunks recycles the slices fetched messages are handed on in. A chunk is
// allocated at its full size once and reused, instead of a slice growing
// by doubling for every response. Only full chunks are handed on (a
// response's part-full last one is copied into a slice of its size), so
// the memory of the chunks in use is bounded by the byte budget: each
// message is charged MessageOverhead, which covers its place in a chunk;
// the chunks waiting for reuse are bounded by freeChunks.
type chunks struct{ free chan []Fetched }

func newChunks() *chunks { return &chunks{free: make(chan []Fetched, freeChunks)} }

// get returns an empty chunk.
func (c *chunks) get() []Fetched {
	select {
	case s := <-c.free:
		return s
	default:
		return make([]Fetched, 0, chunkSize)
	}
}

// put gives back a chunk once its messages are settled or copied. Its
// messages are let go first: a chunk waiting for reuse must not keep them
// alive.
func (c *chunks) put(s []Fetched) {
	if cap(s) != chunkSize {
		return // not a chunk (nil, or a caller's own slice)
	}
	clear(s)
	select {
	case c.free <- s[:0]:
	default:
	}
}
