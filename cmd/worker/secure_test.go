package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// The worker consumes and dead-letters through a SASL listener of the real
// broker, with each mechanism, and gets nowhere with a wrong password.
func TestSASL(t *testing.T) {
	t.Parallel()
	saslBrokers := os.Getenv("TESTENV_SASL_BROKERS")
	if saslBrokers == "" {
		t.Skip("needs the SASL listener of scripts/services.sh (make test starts it)")
	}
	user, password := os.Getenv("TESTENV_SASL_USERNAME"), os.Getenv("TESTENV_SASL_PASSWORD")
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			// The password from a file, as a mounted Secret gives it.
			said := consumeThrough(t, saslBrokers, "--kafka-sasl-mechanism", mech, "--kafka-sasl-username", user, "--kafka-sasl-password-file", pwFile)
			if strings.Contains(said, password) {
				t.Error("the SASL password appears in the logs, /status or /metrics")
			}
			if strings.Contains(said, "deprecated") {
				t.Error("a warning about a password flag that was not given")
			}
		})
	}
	// PLAIN sends the password as it is: over this plaintext listener only
	// when asked, and a password given as a flag is warned about.
	t.Run("PLAIN", func(t *testing.T) {
		e := newEnv(t, tenantsYAML)
		_, err := e.cmd(t, "run", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", user, "--kafka-sasl-password-file", pwFile)
		if codeOf(err) != 2 || !strings.Contains(err.Error(), "--allow-plaintext-sasl") {
			t.Errorf("PLAIN without TLS: exit %d, %v", codeOf(err), err)
		}
		said := consumeThrough(t, saslBrokers, "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", user, "--kafka-sasl-password", password, "--allow-plaintext-sasl")
		if strings.Contains(said, password) {
			t.Error("the SASL password appears in the logs, /status or /metrics")
		}
		if !strings.Contains(said, "--kafka-sasl-password is deprecated and goes at the next major release: use --kafka-sasl-password-file, since a password on the command line shows") {
			t.Error("no warning about the password given as a flag")
		}
	})
	// A bearer token from a file, which the broker validates as Kafka's
	// unsecured tokens (services.sh): its sub is the SASL user.
	t.Run("OAUTHBEARER", func(t *testing.T) {
		tok := func(exp time.Time) string {
			enc := base64.RawURLEncoding.EncodeToString
			path := filepath.Join(t.TempDir(), "token")
			claims := fmt.Sprintf(`{"sub":%q,"iat":%d,"exp":%d}`, user, time.Now().Unix(), exp.Unix())
			if err := os.WriteFile(path, []byte(enc([]byte(`{"alg":"none"}`))+"."+enc([]byte(claims))+".\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}
		good := tok(time.Now().Add(time.Hour))
		said := consumeThrough(t, saslBrokers, "--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-oauthbearer-token-file", good, "--allow-plaintext-sasl")
		if data, _ := os.ReadFile(good); strings.Contains(said, strings.TrimSpace(string(data))) {
			t.Error("the bearer token appears in the logs, /status or /metrics")
		}
		// An expired token: the broker's refusal is logged with its
		// reason, and nothing is written.
		e := newEnv(t, tenantsYAML)
		if out, err := e.cmd(t, "setup"); err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		plaintext := e.brokers
		e.workerBrokers = []string{saslBrokers}
		stop, logs := e.startWorker(t, "--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-oauthbearer-token-file", tok(time.Now().Add(-time.Hour)), "--allow-plaintext-sasl")
		testenv.Produce(t, plaintext, e.topic, click{EventID: "o-1", TenantID: "acme"}.bytes())
		testenv.Eventually(t, 20*time.Second, func() (bool, string) {
			return strings.Contains(logs.String(), `the broker refused the OAUTHBEARER token: {\"status\":\"invalid_token\"}`), "no refusal of the expired token logged"
		})
		if n := len(e.rows(t)); n != 0 {
			t.Errorf("%d rows written with an expired token", n)
		}
		_ = stop()
	})
	t.Run("wrong password", func(t *testing.T) {
		e := newEnv(t, tenantsYAML)
		if out, err := e.cmd(t, "setup"); err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		plaintext := e.brokers
		e.brokers = []string{saslBrokers}
		wrong := filepath.Join(t.TempDir(), "wrong")
		if err := os.WriteFile(wrong, []byte("wr0ng-S3cret-ZQX"), 0o600); err != nil {
			t.Fatal(err)
		}
		stop, logs := e.startWorker(t, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", user, "--kafka-sasl-password-file", wrong)
		testenv.Produce(t, plaintext, e.topic, click{EventID: "s-1", TenantID: "acme"}.bytes())
		testenv.Eventually(t, 20*time.Second, func() (bool, string) {
			return strings.Contains(logs.String(), "SASL Authentication Failed"), fmt.Sprintf("no authentication error logged:\n%s", logs)
		})
		if n := len(e.rows(t)); n != 0 {
			t.Errorf("%d rows written with a wrong password", n)
		}
		_ = stop()
		if strings.Contains(logs.String(), "wr0ng-S3cret-ZQX") {
			t.Error("the refused password appears in the errors logged")
		}
	})
}

// consumeThrough runs a worker that connects through the listener at addr
// with flags: two good events produced through the plaintext listener land
// in Bigtable, and the bad one is dead-lettered, through addr too (the
// worker knows no other broker). It returns the worker's logs.
func consumeThrough(t *testing.T, addr string, flags ...string) string {
	t.Helper()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	e.workerBrokers = []string{addr}
	stop, logs := e.startWorker(t, flags...)
	testenv.Produce(t, e.brokers, e.topic,
		click{EventID: "s-1", TenantID: "acme", UserID: "u"}.bytes(),
		click{EventID: "s-2", TenantID: "globex", UserID: "u"}.bytes(),
		[]byte("not json"))
	e.waitRows(t, 2, 30*time.Second)
	if dl := testenv.ReadAll(t, e.brokers, e.topic+".dlq", 1, 20*time.Second); len(dl) != 1 {
		t.Errorf("%d dead letters through %s, want 1", len(dl), addr)
	}
	// What the admin port shows, for callers that look for secrets in it.
	base := adminURL(t, logs)
	_, status := testenv.MustGet(t, base+"/status?tenants=true")
	_, metrics := testenv.MustGet(t, base+"/metrics")
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
	return logs.String() + status + metrics
}

// tlsListener is the address of one of the TLS listeners of
// scripts/services.sh, named by envVar, and a function that names a PEM
// file of its certificates (scripts/gencerts).
func tlsListener(t *testing.T, envVar string) (addr string, pem func(name string) string) {
	t.Helper()
	addr, dir := os.Getenv(envVar), os.Getenv("TESTENV_TLS_DIR")
	if addr == "" || dir == "" {
		t.Skipf("needs the TLS listeners of scripts/services.sh, $%s and $TESTENV_TLS_DIR (make test starts them)", envVar)
	}
	return addr, func(name string) string { return filepath.Join(dir, name) }
}

// The worker consumes and dead-letters through a TLS listener that
// verifies no client, trusting the test CA.
func TestTLS(t *testing.T) {
	t.Parallel()
	addr, pem := tlsListener(t, "TESTENV_TLS_BROKERS")
	consumeThrough(t, addr, "--kafka-tls", "--kafka-tls-ca", pem("ca.pem"))
}

// The same through a listener that requires a client certificate of its
// CA (ssl.client.auth=required).
func TestTLSMutual(t *testing.T) {
	t.Parallel()
	addr, pem := tlsListener(t, "TESTENV_MTLS_BROKERS")
	consumeThrough(t, addr, "--kafka-tls", "--kafka-tls-ca", pem("ca.pem"),
		"--kafka-tls-cert", pem("client.pem"), "--kafka-tls-key", pem("client-key.pem"))
}

// The same through SASL over TLS, with SCRAM-SHA-512.
func TestSASLSSL(t *testing.T) {
	t.Parallel()
	addr, pem := tlsListener(t, "TESTENV_SASL_SSL_BROKERS")
	user, password := os.Getenv("TESTENV_SASL_USERNAME"), os.Getenv("TESTENV_SASL_PASSWORD")
	logs := consumeThrough(t, addr, "--kafka-tls", "--kafka-tls-ca", pem("ca.pem"),
		"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", user, "--kafka-sasl-password", password)
	if strings.Contains(logs, password) {
		t.Error("the SASL password appears in the logs")
	}
}

// refusedAtStartup runs the worker, which must refuse to start with an
// error that contains want, printed as main prints it, and a non-zero exit
// status. --startup-timeout is long: a refused certificate is said at
// once, not after waiting for it to heal.
func refusedAtStartup(t *testing.T, addr, want string, flags ...string) {
	t.Helper()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	e.workerBrokers = []string{addr}
	// Bounded: a worker that does start would otherwise run for good.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	err := run(ctx, e.args("run", append([]string{"--startup-timeout", "30s"}, flags...)...), &out, &out)
	took := time.Since(start)
	code := exitCode(err, &out)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("worker run: %v, want %q\n%s", err, want, out.String())
	}
	t.Logf("worker: %v (exit status %d after %s)", err, code, took.Round(time.Millisecond))
	if code == 0 || !strings.Contains(out.String(), "worker: "+want) {
		t.Errorf("exit status %d, output:\n%s\nwant non-zero and %q", code, out.String(), want)
	}
	if took > 15*time.Second || strings.Contains(out.String(), "trying again") {
		t.Errorf("took %s, output:\n%s\nwant the refusal said at once, without retries", took, out.String())
	}
}

// A broker certificate of a CA the worker does not trust: start-up fails
// at once, naming the broker and the reason.
func TestTLSWrongCA(t *testing.T) {
	t.Parallel()
	addr, pem := tlsListener(t, "TESTENV_TLS_BROKERS")
	refusedAtStartup(t, addr,
		"refusing to start: Kafka broker "+addr+": TLS handshake: tls: failed to verify certificate: x509: certificate signed by unknown authority",
		"--kafka-tls", "--kafka-tls-ca", pem("wrong-ca.pem"))
}

// A client certificate the mutual-TLS listener refuses, expired though of
// the right CA: start-up fails at once, naming the broker and the reason.
func TestTLSExpiredClientCert(t *testing.T) {
	t.Parallel()
	addr, pem := tlsListener(t, "TESTENV_MTLS_BROKERS")
	refusedAtStartup(t, addr,
		"refusing to start: Kafka broker "+addr+": TLS handshake: remote error: tls: ",
		"--kafka-tls", "--kafka-tls-ca", pem("ca.pem"), "--kafka-tls-cert", pem("client-expired.pem"), "--kafka-tls-key", pem("client-expired-key.pem"))
}
