package bounded

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Text keeps what fits, and cuts what does not to the bound, at a rune
// boundary, saying how long it was.
func TestText(t *testing.T) {
	if got := Text("short", 100); got != "short" {
		t.Errorf("a text that fits: %q", got)
	}
	long := strings.Repeat("é", 5000) // two bytes each
	for _, bound := range []int{Reason, Answer, 101, 100, 10} {
		got := Text(long, bound)
		if len(got) > bound || !utf8.ValidString(got) || bound >= 64 && !strings.HasSuffix(got, "(10000 bytes, cut)") {
			t.Errorf("cut to %d: %d bytes, valid %t: %q", bound, len(got), utf8.ValidString(got), got[max(0, len(got)-30):])
		}
	}
}
