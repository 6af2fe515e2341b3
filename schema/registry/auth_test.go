package registry

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cellttl/cellttl/event"
)

// The registry's basic auth: the password is read from its file at each
// request (a rotated Secret needs no restart), and appears in no error, no
// log line, no status.
func TestBasicAuth(t *testing.T) {
	f := newFake()
	for id := 1; id <= 3; id++ {
		f.add(id, sr.Schema{Schema: clickAvro})
	}
	want := "s3cret-one"
	f.allow = func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		return ok && u == "reader" && p == want
	}
	pwFile := filepath.Join(t.TempDir(), "password")
	writePassword := func(pw string) {
		t.Helper()
		if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writePassword("s3cret-one")
	url := f.serve(t)
	s, logs := open(t, Config{URL: url, Username: "reader", PasswordFile: pwFile, Timeout: time.Second}, contractMapping(t, event.DefaultFields()))
	if err := await(s, click(t, 1, "u-1"), 5*time.Second); err != nil {
		t.Fatalf("with the password: %v", err)
	}

	// The Secret rotates: the next request sends the new password.
	f.mu.Lock()
	want = "s3cret-two"
	f.mu.Unlock()
	writePassword("s3cret-two")
	if err := await(s, click(t, 2, "u-1"), 5*time.Second); err != nil {
		t.Fatalf("after the password file changed: %v", err)
	}

	// A wrong password is refused; the refusal holds the values and names
	// the registry, never the password.
	writePassword("wr0ng-passw0rd")
	err := awaitAnswer(t, s, click(t, 3, "u-1"))
	_, derr := s.DecodeValue(t.Context(), click(t, 3, "u-1"))
	var ue *UnavailableError
	if !errors.As(derr, &ue) || !strings.Contains(derr.Error(), "HTTP 401") || !strings.Contains(derr.Error(), url) {
		t.Fatalf("DecodeValue with a wrong password: %v, want an *UnavailableError naming %s and HTTP 401", derr, url)
	}
	var said []string
	for _, e := range []error{err, derr, s.Problem()} {
		if e == nil {
			t.Fatal("no error with a wrong password")
		}
		said = append(said, e.Error())
	}
	said = append(said, logs.String(), s.Status().Error)
	for _, pw := range []string{"wr0ng-passw0rd", "s3cret-one", "s3cret-two"} {
		for _, text := range said {
			if strings.Contains(text, pw) {
				t.Fatalf("a password shows:\n%s", text)
			}
		}
	}

	// Every request carried basic auth.
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, a := range f.auths {
		if !strings.HasPrefix(a, "Basic ") {
			t.Fatalf("request %d had Authorization %q, want basic auth", i, a)
		}
	}
}

// A password file that cannot be a password is refused at start-up, the
// file named and its content not.
func TestPasswordFileErrorsNameTheFileOnly(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "password")
	if err := os.WriteFile(bad, []byte("hunter2\x07secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{Format: "avro", URL: "http://127.0.0.1:1", Username: "reader", PasswordFile: bad, CacheSize: 1, Timeout: time.Second}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Validate: %v, want the file named and nothing of its content", err)
	}
	c.PasswordFile = filepath.Join(dir, "missing")
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--schema-registry-password-file") {
		t.Fatalf("Validate of a missing file: %v", err)
	}
}

// The registry over TLS: its certificate verified against the CA file, a
// client certificate presented to a registry that requires one.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	caFile := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.der)
	serverCert := ca.issue(t, "registry", x509.ExtKeyUsageServerAuth)
	clientCert := ca.issue(t, "cellttl", x509.ExtKeyUsageClientAuth)
	certFile := writePEM(t, dir, "client.pem", "CERTIFICATE", clientCert.der)
	keyFile := writePEM(t, dir, "client-key.pem", "PRIVATE KEY", clientCert.key)

	f := newFake()
	f.add(1, sr.Schema{Schema: clickAvro})
	srv := httptest.NewUnstartedServer(f)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serverCert.tls(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool(),
		MinVersion:   tls.VersionTLS12,
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused on purpose
	srv.StartTLS()
	f.cleanup(t, srv)

	v := click(t, 1, "u-1")
	s, _ := open(t, Config{URL: srv.URL, CAFile: caFile, CertFile: certFile, KeyFile: keyFile, Timeout: time.Second}, contractMapping(t, event.DefaultFields()))
	if err := await(s, v, 5*time.Second); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	if doc, err := s.DecodeValue(t.Context(), v); err != nil || !strings.Contains(string(doc), `"user_id":"u-1"`) {
		t.Fatalf("DecodeValue over TLS: %s, %v", doc, err)
	}

	for name, tc := range map[string]struct {
		c    Config
		says string
	}{
		// The system pool does not know the test's CA.
		"no CA file": {Config{URL: srv.URL, CertFile: certFile, KeyFile: keyFile}, "unknown authority"},
		// The registry requires a client certificate.
		"no client certificate": {Config{URL: srv.URL, CAFile: caFile}, "certificate required"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.c.Timeout = time.Second
			s, _ := open(t, tc.c, contractMapping(t, event.DefaultFields()))
			_, err := s.DecodeValue(t.Context(), v)
			var ue *UnavailableError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), srv.URL) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("DecodeValue: %v, want the registry named and %q", err, tc.says)
			}
		})
	}
}

type certificate struct {
	der  []byte
	key  []byte // PKCS #8
	cert *x509.Certificate
	priv *ecdsa.PrivateKey
}

func (c certificate) tls(t *testing.T) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: c.key}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func (c certificate) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

func newCA(t *testing.T) certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "cellttl test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	return sign(t, tmpl, nil)
}

// issue signs a certificate for 127.0.0.1 with the CA.
func (c certificate) issue(t *testing.T, name string, usage x509.ExtKeyUsage) certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	return sign(t, tmpl, &c)
}

func sign(t *testing.T, tmpl *x509.Certificate, parent *certificate) certificate {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	issuer, signer := tmpl, priv
	if parent != nil {
		issuer, signer = parent.cert, parent.priv
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &priv.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return certificate{der: der, key: key, cert: cert, priv: priv}
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
