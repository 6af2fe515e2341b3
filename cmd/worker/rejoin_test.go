package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// A tenant comes back under its id only when told. Against the real
// broker and emulator: acme is offboarded and listed as offboarded; an
// edit listing it again is refused by the running worker, and worker
// check says why; worker offboard --rejoin ends the offboarding, the
// worker then takes the same edit unprompted, and acme's new events are
// written. A replay by a new group writes none of acme's events of before
// it left, nor those appended while it was away.
func TestRejoinedTenantIsWrittenAgain(t *testing.T) {
	t.Parallel()
	const (
		both = "default_ttl: 2d\ntenants:\n  globex: 1h\n  acme: 3h\n"
		away = "default_ttl: 2d\ntenants:\n  globex: 1h\n  acme: offboarded\n"
	)
	e := newEnv(t, both)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	// A short --max-clock-skew: an event stamped up to it past the time
	// the tenant left stays erased after the rejoin.
	fast := []string{"--erasure-refresh", "200ms", "--tenants-reload-interval", "100ms", "--max-clock-skew", "1s"}
	seq := 0
	acme := func(phase string, n int) [][]byte {
		var out [][]byte
		for range n {
			seq++
			out = append(out, click{EventID: fmt.Sprintf("%s-%d", phase, seq), TenantID: "acme", UserID: "u-1", OccurredAt: time.Now().UTC().Format(time.RFC3339Nano)}.bytes())
		}
		return out
	}
	stop, _ := e.startWorker(t, fast...)
	testenv.Produce(t, e.brokers, e.topic, acme("before", 3)...)
	e.waitRows(t, 3, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := e.cmd(t, "offboard", "--tenant", "acme", "--requested-by", "contract-end", "--second-pass-after", "10ms", "--max-clock-skew", "1s"); err != nil {
		t.Fatalf("offboard: %v\n%s", err, out)
	}
	oldFile := e.tenantsFile + ".away"
	if err := os.WriteFile(oldFile, []byte(away), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := e.cmd(t, "check", "--against", oldFile)
	if !strings.Contains(out, "listed again after they were offboarded (acme)") || !strings.Contains(out, "worker offboard --rejoin") {
		t.Errorf("check --against the offboarded file does not say what listing acme again does:\n%s", out)
	}
	e.writeTenants(t, away)
	// Retimed as unlisted, acme's rows would take default_ttl.
	if out, err := e.cmd(t, "retime", "--tenant", "acme"); codeOf(err) != 2 || !strings.Contains(out+err.Error(), "lists it as offboarded") {
		t.Errorf("retime of a tenant listed as offboarded: exit %d, %v\n%s", codeOf(err), err, out)
	}
	time.Sleep(1500 * time.Millisecond) // past the time acme left and the skew
	testenv.Produce(t, e.brokers, e.topic, acme("away", 2)...)
	stop, logs := e.startWorker(t, fast...)
	base := adminURL(t, logs)
	e.waitCommitted(t, 30*time.Second)
	e.writeTenants(t, both)
	reload := func() (ok bool, lastErr, version string) {
		_, body := testenv.MustGet(t, base+"/status")
		var st struct {
			Config struct {
				Reload struct {
					LastOK    bool   `json:"last_ok"`
					LastError string `json:"last_error"`
					Version   string `json:"version"`
				} `json:"reload"`
			} `json:"config"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("/status: %v\n%s", err, body)
		}
		r := st.Config.Reload
		return r.LastOK, r.LastError, r.Version
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		ok, msg, _ := reload()
		return !ok && strings.Contains(msg, "tenants.acme: the tenant left at"), fmt.Sprintf("reload: ok %t, %q; want refused for acme", ok, msg)
	})
	out, err := e.cmd(t, "offboard", "--tenant", "acme", "--rejoin", "--requested-by", "contract-renewed", "--max-clock-skew", "1s", "--second-pass-after", "10ms")
	if err != nil || !strings.Contains(out, "rejoined tenant acme, requested by contract-renewed") {
		t.Fatalf("rejoin: %v\n%s", err, out)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		ok, msg, _ := reload()
		return ok, fmt.Sprintf("the listing of acme is still refused after the rejoin: %q", msg)
	})
	testenv.Produce(t, e.brokers, e.topic, acme("back", 2)...)
	e.waitRows(t, 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	replay, _ := e.startWorker(t, append(fast, "--group", testenv.Name("replay"))...)
	time.Sleep(2 * time.Second) // the whole topic, 7 records
	if err := replay(); err != nil {
		t.Fatal(err)
	}
	var phases []string
	for key := range e.rows(t) {
		phases = append(phases, key[strings.LastIndexByte(key, '#')+1:])
	}
	sort.Strings(phases)
	if len(phases) != 2 || !strings.HasPrefix(phases[0], "back-") || !strings.HasPrefix(phases[1], "back-") {
		t.Errorf("rows after the rejoin and a replay: %v, want acme's two events sent back", phases)
	}
	if _, err := e.cmd(t, "offboard", "--tenant", "acme", "--rejoin", "--requested-by", "twice"); codeOf(err) != 2 {
		t.Errorf("a rejoin of a tenant not offboarded: exit %d, want 2", codeOf(err))
	}
}
