package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/testenv"
)

// The worker consumes and dead-letters through a SASL listener of the real
// broker, with each mechanism, and gets nowhere with a wrong password.
func TestSASL(t *testing.T) {
	saslBrokers := os.Getenv("CELLTTL_SASL_BROKERS")
	if saslBrokers == "" {
		t.Skip("needs the SASL listener of scripts/services.sh (make test starts it)")
	}
	user, password := os.Getenv("CELLTTL_SASL_USERNAME"), os.Getenv("CELLTTL_SASL_PASSWORD")
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"} {
		t.Run(mech, func(t *testing.T) {
			e := newEnv(t, tenantsYAML)
			if out, err := e.cmd(t, "setup"); err != nil {
				t.Fatalf("setup: %v\n%s", err, out)
			}
			plaintext := e.brokers
			e.brokers = []string{saslBrokers}
			stop, logs := e.startWorker(t, "--kafka-sasl-mechanism", mech, "--kafka-sasl-username", user, "--kafka-sasl-password", password)
			testenv.Produce(t, plaintext, e.topic,
				click{EventID: "s-1", TenantID: "acme", UserID: "u"}.bytes(),
				click{EventID: "s-2", TenantID: "globex", UserID: "u"}.bytes(),
				[]byte("not json"))
			e.waitRows(t, 2, 30*time.Second)
			if dl := testenv.ReadAll(t, plaintext, e.topic+".dlq", 1, 20*time.Second); len(dl) != 1 {
				t.Errorf("%d dead letters through SASL, want 1", len(dl))
			}
			if err := stop(); err != nil {
				t.Fatalf("worker: %v", err)
			}
			if strings.Contains(logs.String(), password) {
				t.Error("the SASL password appears in the logs")
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		e := newEnv(t, tenantsYAML)
		if out, err := e.cmd(t, "setup"); err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		plaintext := e.brokers
		e.brokers = []string{saslBrokers}
		stop, logs := e.startWorker(t, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", user, "--kafka-sasl-password", "wrong")
		testenv.Produce(t, plaintext, e.topic, click{EventID: "s-1", TenantID: "acme"}.bytes())
		testenv.Eventually(t, 20*time.Second, func() (bool, string) {
			return strings.Contains(logs.String(), "SASL Authentication Failed"), fmt.Sprintf("no authentication error logged:\n%s", logs)
		})
		if n := len(e.rows(t)); n != 0 {
			t.Errorf("%d rows written with a wrong password", n)
		}
		_ = stop()
	})
}
