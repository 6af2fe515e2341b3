// What a test asks of the Kafka broker: a real one, and whether its
// version changes the answer.

package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// NeedsBroker skips t, and says why, when Kafka would be the in-process
// stand-in: what t checks is the real broker's own (its retention deleting
// segments, a topic setting kfake does not know, its retention check).
// make test runs it against the real broker.
func NeedsBroker(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("KAFKA_BROKERS") == "" {
		t.Skipf("needs a real Kafka broker for %s, which the in-process stand-in does not have: make test, or scripts/services.sh start", what)
	}
}

// BrokerVersionMatters says that what t checks depends on the Kafka
// broker's version (what), and logs it with the broker's version.
// make test runs every test against Kafka 4; make test-kafka3 runs again,
// against Kafka 3.9, only the tests that call this first thing in their
// body (scripts/brokertests finds them): the batch reader, transactions,
// record timestamps, topic settings, the group protocol. A test that
// reads no broker has nothing to say here.
func BrokerVersionMatters(t testing.TB, what string) {
	t.Helper()
	if v := os.Getenv("TESTENV_KAFKA_VERSION"); v != "" {
		t.Logf("against Kafka %s, whose answer may differ by version: %s", v, what)
	}
}

// KafkaMajor is the major version of the real broker scripts/services.sh
// started (TESTENV_KAFKA_VERSION), 0 when unknown.
func KafkaMajor() int {
	v, _, _ := strings.Cut(os.Getenv("TESTENV_KAFKA_VERSION"), ".")
	n, _ := strconv.Atoi(v)
	return n
}
