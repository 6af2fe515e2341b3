package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// demo runs `worker demo` as a user does, in a process of its own, without
// BIGTABLE_EMULATOR_HOST: the demo hands its clients its own emulator, and
// with the variable set (make test sets it) the client library would also
// dial the emulator it names. A process of its own leaves the tests'
// environment alone, so the demo runs beside the other tests.
func demo(t *testing.T, ctx context.Context, args ...string) (stdout string, err error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, testenv.WorkerBinary(t), append([]string{"demo"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BIGTABLE_EMULATOR_HOST=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%w\n%s\n%s", err, out.String(), errOut.String())
	}
	return out.String(), nil
}

// The demo runs the real pipeline end to end and its summary shows the
// short-TTL tenant's cells gone while the long one's are still live.
func TestDemo(t *testing.T) {
	t.Parallel()
	out, err := demo(t, context.Background(), "--duration", "12s", "--produce-for", "2s", "--every", "11s", "--rate", "100")
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	t.Log(out)
	// flash (5s) written ~10s ago must be gone from reads; keeper (45s) live.
	row := func(tenant string) (written, live int) {
		m := regexp.MustCompile(`(?m)^\s+` + tenant + `\s+\S+\s+(\d+)\s+\d+\s+\d+\s+\d+\s+(\d+)`).FindStringSubmatch(out)
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
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := demo(t, ctx, "--produce-for", "1s", "--every", "2s", "--rate", "50")
	if err != nil || ctx.Err() != nil {
		t.Fatalf("demo: %v (context %v)", err, ctx.Err())
	}
	if !strings.Contains(out, "every tenant's cells are gone") {
		t.Errorf("the demo did not say it was done:\n%s", out)
	}
}
