package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The demo runs the real pipeline end to end and its summary shows the
// short-TTL tenant's cells gone while the long one's are still live.
func TestDemo(t *testing.T) {
	// The demo hands its clients its own emulator. With the variable set
	// (make test sets it), the client library would also dial the emulator
	// it names and leave that connection open, as a user's shell might;
	// the test wants to see no stray connection.
	t.Setenv("BIGTABLE_EMULATOR_HOST", "")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"demo", "--duration", "12s", "--produce-for", "2s", "--every", "11s", "--rate", "100"}, &out, &errOut)
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	t.Log(out.String())
	// flash (5s) written ~10s ago must be gone from reads; keeper (45s) live.
	row := func(tenant string) (written, live int) {
		m := regexp.MustCompile(`(?m)^\s+` + tenant + `\s+\S+\s+(\d+)\s+\d+\s+\d+\s+\d+\s+(\d+)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no summary line for %s", tenant)
		}
		w, _ := strconv.Atoi(m[1])
		l, _ := strconv.Atoi(m[2])
		return w, l
	}
	if w, l := row("flash"); w == 0 || l != 0 {
		t.Errorf("flash: written %d, live %d; want some written and none live after 5s", w, l)
	}
	if w, l := row("keeper"); w == 0 || l != w {
		t.Errorf("keeper: written %d, live %d; want all live within 45s", w, l)
	}
}

// Without --duration the demo ends by itself, exit 0, once the emulator's
// GC has taken every tenant's cells, and says so.
func TestDemoEnds(t *testing.T) {
	t.Setenv("BIGTABLE_EMULATOR_HOST", "")
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := run(ctx, []string{"demo", "--produce-for", "1s", "--every", "2s", "--rate", "50"}, &out, &errOut)
	if err != nil || ctx.Err() != nil {
		t.Fatalf("demo: %v (context %v)\n%s\n%s", err, ctx.Err(), out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "every tenant's cells are gone") {
		t.Errorf("the demo did not say it was done:\n%s", out.String())
	}
}
