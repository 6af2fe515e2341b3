package envflag

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// isolate hides the CELLTTL_ variables of the environment the tests run in
// (make test exports CELLTTL_BROKERS) for the length of t: each test sets
// the ones it means.
func isolate(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, Prefix) {
			t.Setenv(name, "") // restored after t
			if err := os.Unsetenv(name); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestPrecedence(t *testing.T) {
	isolate(t)
	t.Setenv("CELLTTL_B", "from-env")
	t.Setenv("CELLTTL_D", "2d")
	t.Setenv("CELLTTL_A", "from-env")
	f := New("x", "x", io.Discard)
	var a, b, c string
	var d time.Duration
	f.String(&a, "a", Env, "default", "")
	f.String(&b, "b", Env, "default", "")
	f.String(&c, "c", Env, "default", "")
	f.Duration(&d, "d", Env, time.Hour, "")
	if err := f.Parse([]string{"--a", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if a != "from-flag" || b != "from-env" || c != "default" || d != 48*time.Hour {
		t.Errorf("a=%q b=%q c=%q d=%s: want the flag, then the variable, then the default", a, b, c, d)
	}
}

// A flag's variable is the prefix and its name; the name it had before is
// read for one release, with a warning, and loses to the new one.
func TestVariableNames(t *testing.T) {
	isolate(t)
	if got := EnvName("kafka-session-timeout"); got != "CELLTTL_KAFKA_SESSION_TIMEOUT" {
		t.Errorf("EnvName = %s", got)
	}
	parse := func(args ...string) (string, string, error) {
		var out strings.Builder
		f := New("worker run", "x", &out)
		var w string
		f.String(&w, "writers", "WRITERS", "4", "")
		err := f.Parse(args)
		return w, out.String(), err
	}
	t.Setenv("WRITERS", "8")
	w, out, err := parse()
	if err != nil || w != "8" || !strings.Contains(out, "WARNING: WRITERS is deprecated and read for this release only: set CELLTTL_WRITERS instead") {
		t.Errorf("legacy variable alone: %q, %v, output %q", w, err, out)
	}
	t.Setenv("CELLTTL_WRITERS", "16")
	w, out, err = parse()
	if err != nil || w != "16" || !strings.Contains(out, "WRITERS is ignored: CELLTTL_WRITERS is set too, and wins") || strings.Contains(out, "8") {
		t.Errorf("both variables: %q, %v, output %q", w, err, out)
	}
	t.Setenv("WRITERS", "16")
	if w, out, err = parse(); err != nil || w != "16" || out != "" {
		t.Errorf("both variables, the same value: %q, %v, output %q", w, err, out)
	}
	if w, out, err = parse("--writers", "2"); err != nil || w != "2" || out != "" {
		t.Errorf("the command line over both: %q, %v, output %q", w, err, out)
	}
}

// A tool's flag set takes the worker's variable, and reads the name it
// read before as the worker's sets do their legacy names.
func TestRenamed(t *testing.T) {
	isolate(t)
	parse := func() (string, string) {
		var out strings.Builder
		f := NewUnprefixed("loadtest", "x", &out)
		var b string
		f.String(&b, "brokers", "CELLTTL_BROKERS", "", "")
		f.Renamed("brokers", "KAFKA_BROKERS")
		if err := f.Parse(nil); err != nil {
			t.Fatal(err)
		}
		return b, out.String()
	}
	t.Setenv("KAFKA_BROKERS", "k:9092")
	if b, out := parse(); b != "k:9092" || !strings.Contains(out, "WARNING: KAFKA_BROKERS is deprecated and read for this release only: set CELLTTL_BROKERS instead") {
		t.Errorf("the old name alone: %q, output %q", b, out)
	}
	t.Setenv("CELLTTL_BROKERS", "k:9092")
	if b, out := parse(); b != "k:9092" || out != "" {
		t.Errorf("both names, the same value (scripts/services.sh): %q, output %q", b, out)
	}
}

// A prefixed variable that names no flag stops the command, with the
// nearest name when it looks misspelt, unless another command has it.
func TestUnknownVariables(t *testing.T) {
	isolate(t)
	t.Setenv("CELLTTL_WRITERZ", "8")
	t.Setenv("CELLTTL_NO_SUCH_THING", "1")
	newSet := func() *FlagSet {
		f := New("x", "x", io.Discard)
		var w string
		f.String(&w, "writers", Env, "4", "")
		return f
	}
	err := newSet().Parse(nil)
	if err == nil {
		t.Fatal("unknown variables accepted")
	}
	for _, want := range []string{"environment variable CELLTTL_WRITERZ names no flag (did you mean CELLTTL_WRITERS?)", "environment variable CELLTTL_NO_SUCH_THING names no flag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Kubernetes' service links of a Service named cellttl-metrics are
	// not the operator's: never an error.
	for _, v := range []string{"CELLTTL_METRICS_SERVICE_HOST", "CELLTTL_METRICS_SERVICE_PORT", "CELLTTL_METRICS_SERVICE_PORT_ADMIN", "CELLTTL_METRICS_PORT",
		"CELLTTL_METRICS_PORT_8080_TCP", "CELLTTL_METRICS_PORT_8080_TCP_ADDR", "CELLTTL_METRICS_PORT_8080_TCP_PORT", "CELLTTL_METRICS_PORT_8080_TCP_PROTO"} {
		t.Setenv(v, "10.0.0.1")
	}
	if err := newSet().Parse(nil); err == nil || strings.Contains(err.Error(), "METRICS") {
		t.Errorf("with service links set: %v, want the two misspelt variables alone", err)
	}
	f := newSet()
	f.KnowAlso(func() []string { return []string{"CELLTTL_WRITERZ", "CELLTTL_NO_SUCH_THING"} })
	if err := f.Parse(nil); err != nil {
		t.Errorf("variables another command knows: %v", err)
	}
	// A flag without a variable has none, prefixed or not.
	f = New("x", "x", io.Discard)
	var force bool
	f.Bool(&force, "force", NoEnv, false, "")
	t.Setenv("CELLTTL_FORCE", "true")
	if err := f.Parse(nil); err == nil || !strings.Contains(err.Error(), "CELLTTL_FORCE names no flag") || force {
		t.Errorf("a flag-only flag read CELLTTL_FORCE: %v, %v", force, err)
	}
	// Unprefixed sets read what they name and check nothing.
	u := NewUnprefixed("x", "x", io.Discard)
	var brokers string
	u.String(&brokers, "brokers", "X_BROKERS", "", "")
	t.Setenv("X_BROKERS", "b:9092")
	if err := u.Parse(nil); err != nil || brokers != "b:9092" {
		t.Errorf("unprefixed: %q, %v", brokers, err)
	}
}

func TestChoice(t *testing.T) {
	isolate(t)
	parse := func(args ...string) (string, error) {
		f := New("x", "x", io.Discard)
		var lv string
		f.Choice(&lv, "log-level", Env, "info", "", "debug", "info", "warn", "error")
		return lv, f.Parse(args)
	}
	if lv, err := parse("--log-level", "WARN"); err != nil || lv != "warn" {
		t.Errorf("WARN: %q, %v", lv, err)
	}
	if lv, err := parse(); err != nil || lv != "info" {
		t.Errorf("default: %q, %v", lv, err)
	}
	if _, err := parse("--log-level", "bogus"); err == nil || !strings.Contains(err.Error(), `"bogus": want debug, info, warn or error`) {
		t.Errorf("bogus: %v", err)
	}
	t.Setenv("CELLTTL_LOG_LEVEL", "verbose")
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), `CELLTTL_LOG_LEVEL="verbose" for --log-level`) {
		t.Errorf("bogus variable: %v", err)
	}
}

// The help lists sections in the order they were declared, the basic tier
// before the advanced one.
func TestHelpSections(t *testing.T) {
	isolate(t)
	var out strings.Builder
	f := New("x", "x: a command.", &out)
	var s string
	var n int
	f.Section("Kafka")
	f.String(&s, "kafka-brokers", "KAFKA_BROKERS", "", "brokers")
	f.Advanced()
	f.Int(&n, "fetch-max-wait", Env, 3, "tuning")
	f.Section("Bigtable")
	f.String(&s, "table", Env, "clicks", "table")
	f.Usage()
	want := `x: a command.

Each flag is also read from the environment variable shown; the command line wins.

Flags:

  Kafka:
  -kafka-brokers string
    	brokers (env CELLTTL_KAFKA_BROKERS)

  Bigtable:
  -table string
    	table (env CELLTTL_TABLE) (default "clicks")

Advanced flags (tuning: the defaults suit most deployments):

  Kafka:
  -fetch-max-wait int
    	tuning (env CELLTTL_FETCH_MAX_WAIT) (default 3)

`
	if out.String() != want {
		t.Errorf("help:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestNoVariable(t *testing.T) {
	isolate(t)
	t.Setenv("X", "from-env")
	f := New("x", "x", io.Discard)
	var x string
	f.String(&x, "x", NoEnv, "default", "")
	if err := f.Parse(nil); err != nil || x != "default" {
		t.Errorf("a flag registered without a variable read one: %q, %v", x, err)
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	isolate(t)
	t.Setenv("CELLTTL_N", "many")
	f := New("x", "x", io.Discard)
	var n int
	f.Int(&n, "n", Env, 1, "")
	err := f.Parse(nil)
	if err == nil || !strings.Contains(err.Error(), `CELLTTL_N="many" for --n`) {
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
	isolate(t)
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
	f := NewUnprefixed("t", "t", &help)
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

// A deprecated flag is still read from the command line, with a warning
// that names what replaces it and no value; its variable stays, without
// a warning. The help lists it apart, after the flags a user picks from.
func TestDeprecated(t *testing.T) {
	isolate(t)
	parse := func(args ...string) (string, string, error) {
		var out strings.Builder
		f := New("worker run", "x", &out)
		var pw, file string
		f.String(&pw, "password", Env, "", "a password")
		f.String(&file, "password-file", Env, "", "a password's file")
		f.Deprecated("password", "use --password-file")
		err := f.Parse(args)
		return pw, out.String(), err
	}
	const warning = "WARNING: --password is deprecated and goes at the next major release: use --password-file"
	if pw, out, err := parse("--password", "s3cret"); err != nil || pw != "s3cret" || !strings.Contains(out, warning) || strings.Contains(out, "s3cret") {
		t.Errorf("from the command line: password %q, err %v, said %q", pw, err, out)
	}
	t.Setenv("CELLTTL_PASSWORD", "s3cret")
	if pw, out, err := parse(); err != nil || pw != "s3cret" || out != "" {
		t.Errorf("from its variable: password %q, err %v, said %q", pw, err, out)
	}
	_, help, err := parse("--help")
	if !IsHelp(err) {
		t.Fatalf("--help: %v", err)
	}
	if strings.Contains(help, "  -password string") || !strings.Contains(help, "  -password-file string") ||
		!strings.Contains(help, "Deprecated on the command line, still read there until the next major release: --password (use --password-file; CELLTTL_PASSWORD stays).") {
		t.Errorf("help:\n%s", help)
	}
}
