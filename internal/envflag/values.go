package envflag

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
)

// choiceValue is the flag.Value of Choice.
type choiceValue struct {
	p       *string
	choices []string
}

func (c *choiceValue) String() string {
	if c.p == nil {
		return ""
	}
	return *c.p
}

func (c *choiceValue) Set(s string) error {
	for _, ch := range c.choices {
		if strings.EqualFold(s, ch) {
			*c.p = ch
			return nil
		}
	}
	return fmt.Errorf("%q: want %s", s, oneOf(c.choices))
}

// oneOf writes choices as "a, b or c".
func oneOf(choices []string) string {
	if len(choices) < 2 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

type durationValue time.Duration

func (d *durationValue) String() string { return duration.Format(time.Duration(*d)) }
func (d *durationValue) Set(s string) error {
	v, err := duration.Parse(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// units are the byte units a size may end with.
var units = []struct {
	name string
	n    int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}, {"KB", 1e3}, {"B", 1}}

// ParseBytes reads a size: a whole number of bytes, optionally followed by
// a unit, B, kB (or KB), KiB, MB, MiB, GB or GiB; a space may come between.
func ParseBytes(s string) (int64, error) {
	num, mul := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.name) {
			num, mul = strings.TrimSpace(strings.TrimSuffix(num, u.name)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mul {
		return 0, fmt.Errorf("invalid size %q: want a whole number of bytes, with or without B, kB, KiB, MB, MiB, GB or GiB", s)
	}
	return n * mul, nil
}

// FormatBytes writes a size with the largest binary unit that divides it.
func FormatBytes(n int64) string {
	for _, u := range units[:3] {
		if n != 0 && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

type bytesValue int64

func (b *bytesValue) String() string { return FormatBytes(int64(*b)) }
func (b *bytesValue) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = bytesValue(n)
	return nil
}

type intBytesValue int

func (b *intBytesValue) String() string { return FormatBytes(int64(*b)) }
func (b *intBytesValue) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	if n > math.MaxInt {
		return fmt.Errorf("invalid size %q: too large", s)
	}
	*b = intBytesValue(n)
	return nil
}
