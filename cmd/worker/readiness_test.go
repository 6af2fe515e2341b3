package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// /readyz turns 503 when Bigtable goes away and back to 200 when it
// returns, and turns 503 when the Kafka broker goes away. The services are
// in-process here because the test stops them.
func TestReadinessFollowsDependencies(t *testing.T) {
	bt, err := inproc.StartBigtable(inproc.BigtableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	btAddr := bt.Addr()
	t.Setenv("BIGTABLE_EMULATOR_HOST", btAddr)
	kc, err := inproc.StartKafka(inproc.KafkaOptions{Topics: []inproc.Topic{{Name: "clicks", Partitions: 3}}, AutoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{brokers: kc.Brokers(), topic: "clicks", group: "ready", table: "clicks"}
	e.dc, e.ac = testenv.Clients(t)
	e.tenantsFile = t.TempDir() + "/tenants.yaml"
	e.writeTenants(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t)
	base := adminURL(t, logs)
	ready := func(want int, contains string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			code, body := testenv.MustGet(t, base+"/readyz")
			return code == want && strings.Contains(body, contains), fmt.Sprintf("/readyz %d: %s", code, body)
		})
	}
	ready(200, "bigtable: ok")

	bt.Close()
	ready(503, "bigtable: not ready")
	if bt, err = inproc.StartBigtable(inproc.BigtableOptions{Addr: btAddr}); err != nil {
		t.Fatalf("restart the emulator on %s: %v", btAddr, err)
	}
	defer bt.Close()
	if out, err := e.cmd(t, "setup"); err != nil { // a fresh emulator is empty
		t.Fatalf("setup: %v\n%s", err, out)
	}
	ready(200, "bigtable: ok")

	kc.Close()
	ready(503, "kafka: not ready")
	if code, _ := testenv.MustGet(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz %d while Kafka is away: liveness must not depend on it", code)
	}
	_ = stop() // the final commit has no broker to go to
}
