// Command gencerts writes the throwaway PEM certificates of the test
// broker's TLS listeners (scripts/services.sh runs it before the broker
// starts), so that no key is ever committed:
//
//	ca.pem                   the CA the broker and the clients trust
//	broker-keystore.pem      the broker's PKCS#8 key and certificate (127.0.0.1, localhost)
//	client.pem, client-key.pem                  a client certificate of the CA
//	client-expired.pem, client-expired-key.pem  the same, expired
//	wrong-ca.pem             an unrelated CA, which signed nothing the broker shows
//
// Usage: go run ./scripts/gencerts -dir DIR -client-cn NAME
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

func main() {
	dir := flag.String("dir", "", "directory to write the PEM files into (required)")
	clientCN := flag.String("client-cn", "cellttl", "common name of the client certificates: the broker's principal for them")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "gencerts: -dir is required")
		os.Exit(2)
	}
	if err := generate(*dir, *clientCN, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "gencerts:", err)
		os.Exit(1)
	}
}

// issued is a certificate with its key.
type issued struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

// caTemplate is a self-signed CA named name.
func caTemplate(name string, from, until time.Time) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             from,
		NotAfter:              until,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
}

func generate(dir, clientCN string, now time.Time) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// Backdated by an hour: a clock a little behind on either side must
	// not see a certificate that is not valid yet.
	from, until := now.Add(-time.Hour), now.Add(10*365*24*time.Hour)
	ca, err := issue(nil, caTemplate("cellttl test CA", from, until))
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	// Another name than the CA's: Go would otherwise say it tried the
	// wrong CA as a candidate, which is not the error a stranger CA gives.
	wrongCA, err := issue(nil, caTemplate("cellttl unrelated CA", from, until))
	if err != nil {
		return fmt.Errorf("wrong CA: %w", err)
	}
	broker, err := issue(ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   from,
		NotAfter:    until,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("broker certificate: %w", err)
	}
	client := func(notBefore, notAfter time.Time) (*issued, error) {
		return issue(ca, &x509.Certificate{
			Subject:     pkix.Name{CommonName: clientCN},
			NotBefore:   notBefore,
			NotAfter:    notAfter,
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
	}
	valid, err := client(from, until)
	if err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	expired, err := client(now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	if err != nil {
		return fmt.Errorf("expired client certificate: %w", err)
	}

	// Kafka's PEM key store takes an unencrypted key only as PKCS#8, with
	// the chain after it in the same file.
	brokerKey, err := keyPEM(broker.key)
	if err != nil {
		return err
	}
	validKey, err := keyPEM(valid.key)
	if err != nil {
		return err
	}
	expiredKey, err := keyPEM(expired.key)
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
	}{
		{"ca.pem", certPEM(ca)},
		{"wrong-ca.pem", certPEM(wrongCA)},
		{"broker-keystore.pem", concat(brokerKey, certPEM(broker), certPEM(ca))},
		{"client.pem", concat(certPEM(valid), certPEM(ca))},
		{"client-key.pem", validKey},
		{"client-expired.pem", concat(certPEM(expired), certPEM(ca))},
		{"client-expired-key.pem", expiredKey},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// issue makes a P-256 key and a certificate for it from template, signed by
// parent, or self-signed when parent is nil.
func issue(parent *issued, template *x509.Certificate) (*issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	template.SerialNumber = serial
	signer, signerKey := template, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &issued{cert: cert, der: der, key: key}, nil
}

func certPEM(c *issued) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der})
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
