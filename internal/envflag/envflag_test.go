package envflag

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestPrecedence(t *testing.T) {
	t.Setenv("CELLTTL_TEST_A", "from-env")
	t.Setenv("CELLTTL_TEST_B", "from-env")
	t.Setenv("CELLTTL_TEST_D", "2d")
	f := New("x", "x", io.Discard)
	var a, b, c string
	var d time.Duration
	f.String(&a, "a", "CELLTTL_TEST_A", "default", "")
	f.String(&b, "b", "CELLTTL_TEST_B", "default", "")
	f.String(&c, "c", "CELLTTL_TEST_C", "default", "")
	f.Duration(&d, "d", "CELLTTL_TEST_D", time.Hour, "")
	if err := f.Parse([]string{"--a", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if a != "from-flag" || b != "from-env" || c != "default" || d != 48*time.Hour {
		t.Errorf("a=%q b=%q c=%q d=%s: want the flag, then the variable, then the default", a, b, c, d)
	}
}

func TestNoVariable(t *testing.T) {
	t.Setenv("X", "from-env")
	f := New("x", "x", io.Discard)
	var x string
	f.String(&x, "x", "", "default", "")
	if err := f.Parse(nil); err != nil || x != "default" {
		t.Errorf("a flag registered without a variable read one: %q, %v", x, err)
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	t.Setenv("CELLTTL_TEST_N", "many")
	f := New("x", "x", io.Discard)
	var n int
	f.Int(&n, "n", "CELLTTL_TEST_N", 1, "")
	err := f.Parse(nil)
	if err == nil || !strings.Contains(err.Error(), `CELLTTL_TEST_N="many" for --n`) {
		t.Errorf("bad variable: %v", err)
	}
	f = New("x", "x", io.Discard)
	if err := f.Parse([]string{"stray"}); err == nil || !strings.Contains(err.Error(), `unexpected argument "stray"`) {
		t.Errorf("stray argument: %v", err)
	}
	f = New("x", "x", io.Discard)
	if err := f.Parse([]string{"--help"}); !IsHelp(err) {
		t.Errorf("--help: %v", err)
	}
}

// Sizes take units, as the docs write them, and plain integers as before.
func TestBytes(t *testing.T) {
	for in, want := range map[string]int64{"67108864": 64 << 20, "64MiB": 64 << 20, "8MB": 8_000_000, "1 GiB": 1 << 30,
		"512KiB": 512 << 10, "3kB": 3000, "3KB": 3000, "7B": 7, "0": 0} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "1.5MiB", "-1", "64mb", "64 M", "9999999999GiB"} {
		if _, err := ParseBytes(in); err == nil || !strings.Contains(err.Error(), "want a whole number of bytes") {
			t.Errorf("ParseBytes(%q): %v, want an error naming the forms", in, err)
		}
	}
	var big int64
	var small int
	var help strings.Builder
	f := New("t", "t", &help)
	f.Bytes(&big, "max-inflight-bytes", "T_MAX_INFLIGHT", 64<<20, "bound")
	f.BytesInt(&small, "flush-bytes", "", 8<<20, "flush")
	t.Setenv("T_MAX_INFLIGHT", "32MiB")
	if err := f.Parse([]string{"--flush-bytes", "1MB"}); err != nil {
		t.Fatal(err)
	}
	if big != 32<<20 || small != 1_000_000 {
		t.Errorf("parsed %d and %d", big, small)
	}
	f.Usage()
	if !strings.Contains(help.String(), "-max-inflight-bytes size") || !strings.Contains(help.String(), "(default 64MiB)") {
		t.Errorf("help:\n%s", help.String())
	}
}
