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
