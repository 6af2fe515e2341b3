package event

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// specials must mark first exactly the first byte the string scan has to
// look at, and mark nothing in a word without one: every byte value at
// every position, among filler of each kind, and random words.
func TestSpecials(t *testing.T) {
	first := func(w [8]byte) int {
		for i, c := range w {
			if c == '"' || c == '\\' || c < 0x20 {
				return i
			}
		}
		return 8
	}
	check := func(w [8]byte) {
		t.Helper()
		m := specials(binary.LittleEndian.Uint64(w[:]))
		got := 8
		if m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if want := first(w); got != want {
			t.Fatalf("%x: first special byte at %d, want %d", w, got, want)
		}
	}
	for _, filler := range []byte{'a', 0x7f, 0x80, 0xff, '!', '#', '[', ']', 0x21, 0x1f, '"'} {
		for pos := range 8 {
			for v := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = filler
				}
				w[pos] = byte(v)
				check(w)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		check(w)
	}
}
