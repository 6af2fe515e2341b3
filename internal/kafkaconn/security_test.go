package kafkaconn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/sasl"
)

func TestSecurityValidate(t *testing.T) {
	dir := t.TempDir()
	pwFile, emptyFile := filepath.Join(dir, "pw"), filepath.Join(dir, "empty")
	if err := os.WriteFile(pwFile, []byte("s3cret-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		s    Security
		want string // "" for valid
	}{
		{Security{}, ""},
		{Security{TLS: true}, ""},
		{Security{SASLMechanism: "SCRAM-SHA-512", Username: "u", Password: "p"}, ""},
		{Security{SASLMechanism: "SCRAM-SHA-1", Username: "u", Password: "p"}, `"SCRAM-SHA-1"`},
		{Security{SASLMechanism: "PLAIN", Username: "u"}, "KAFKA_SASL_PASSWORD"},
		{Security{Username: "u"}, "without --kafka-sasl-mechanism"},
		{Security{CAFile: "ca.pem"}, "without --kafka-tls"},
		{Security{TLS: true, CertFile: "c.pem"}, "give both or neither"},
		// PLAIN sends the password as it is: not over a plaintext listener
		// unless asked.
		{Security{SASLMechanism: "PLAIN", Username: "u", Password: "p"}, "--allow-plaintext-sasl"},
		{Security{SASLMechanism: "PLAIN", Username: "u", Password: "p", AllowPlaintextSASL: true}, ""},
		{Security{SASLMechanism: "PLAIN", Username: "u", Password: "p", TLS: true}, ""},
		{Security{SASLMechanism: "SCRAM-SHA-256", Username: "u", PasswordFile: pwFile}, ""},
		{Security{SASLMechanism: "SCRAM-SHA-256", Username: "u", PasswordFile: pwFile, Password: "p"}, "give one"},
		{Security{SASLMechanism: "SCRAM-SHA-256", Username: "u", PasswordFile: emptyFile}, "is empty"},
		{Security{SASLMechanism: "SCRAM-SHA-256", Username: "u", PasswordFile: "/nonexistent/pw"}, "--kafka-sasl-password-file"},
	}
	for _, tt := range tests {
		err := tt.s.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want %q", tt.s, err, tt.want)
		}
	}
}

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cellttl test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestSecurityDialerAndTransport(t *testing.T) {
	// Every connection's answers are checked, plaintext or not; TLS is
	// done beneath the check, never by kafka-go above it (the TLS tests
	// of cmd/worker connect through it).
	if d, err := (Security{}).Dialer(); err != nil || d.DialFunc == nil || d.TLS != nil {
		t.Errorf("plaintext dialer: %+v, %v; want a checked DialFunc", d, err)
	}
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	s := Security{TLS: true, CAFile: cert, CertFile: cert, KeyFile: key, SASLMechanism: "SCRAM-SHA-256", Username: "u", Password: "p"}
	d, err := s.Dialer()
	if err != nil {
		t.Fatal(err)
	}
	if d.TLS != nil || d.DialFunc == nil || d.SASLMechanism == nil || d.SASLMechanism.Name() != "SCRAM-SHA-256" {
		t.Errorf("dialer: %+v", d)
	}
	tr, err := s.Transport()
	if err != nil || tr.TLS != nil || tr.Dial == nil || tr.SASL == nil {
		t.Errorf("transport: %+v, %v", tr, err)
	}
	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("not a certificate"), 0o600)
	if _, err := (Security{TLS: true, CAFile: bad}).Dialer(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad CA file: %v", err)
	}
}

// The password comes from the file's first line, read at every
// handshake of the dialer and the transport the worker uses: a rotated
// file is taken by the next connection without a restart. No error
// quotes it.
func TestPasswordFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(f, []byte("first-secret\r\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := Security{SASLMechanism: "PLAIN", Username: "u", PasswordFile: f, TLS: true}
	d, err := s.Dialer()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.Transport()
	if err != nil {
		t.Fatal(err)
	}
	// PLAIN's initial response is \x00user\x00password.
	handshake := func(m interface {
		Start(context.Context) (sasl.StateMachine, []byte, error)
	}) string {
		_, ir, err := m.Start(context.Background())
		if err != nil {
			return "error: " + err.Error()
		}
		return string(ir)
	}
	if got := handshake(d.SASLMechanism); got != "\x00u\x00first-secret" {
		t.Fatalf("first handshake sends %q", got)
	}
	if err := os.WriteFile(f, []byte("rotated-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]sasl.Mechanism{"dialer": d.SASLMechanism, "transport": tr.SASL} {
		if got := handshake(m); got != "\x00u\x00rotated-secret" {
			t.Errorf("%s after the rotation sends %q", name, got)
		}
	}
	// A password SCRAM cannot prepare, and one with a control character:
	// refused, without quoting it.
	for _, pw := range []string{"tab\there-S3cret", "bell\aS3cret"} {
		if err := os.WriteFile(f, []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, mech := range []string{"PLAIN", "SCRAM-SHA-256"} {
			s := Security{SASLMechanism: mech, Username: "u", PasswordFile: f, TLS: true}
			err := s.Validate()
			if err == nil || strings.Contains(err.Error(), "S3cret") {
				t.Errorf("%s with %q: %v", mech, pw, err)
			}
			if _, _, err := (fileMechanism{s}).Start(context.Background()); err == nil || strings.Contains(err.Error(), "S3cret") {
				t.Errorf("%s handshake with %q: %v", mech, pw, err)
			}
		}
	}
	// Not a regular file: refused at once, not read (a FIFO would block).
	s.PasswordFile = t.TempDir()
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as the password file: %v", err)
	}
}

// A CA file past its bound is refused, naming the file and the bound.
func TestCAFileIsBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(big, make([]byte, maxCAFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (Security{TLS: true, CAFile: big}).Dialer(); err == nil || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a CA file past maxCAFile: %v, want it refused", err)
	}
}
