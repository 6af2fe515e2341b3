// Package kafkaconn is how cellttl connects to Kafka: TLS, SASL and the
// password file (Security, with its flags), a check of a broker's TLS
// settings, the ACL probe of a topic's write permission, and the admin
// reads of the input topic's record-timestamp settings. The consumer
// (ingest), the dead-letter writer (deadletter) and redrive share it.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/cellttl/cellttl/internal/bounded"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/keyfile"
)

// Security is how the worker connects to Kafka: TLS and SASL settings
// shared by the consumer and the dead-letter producer.
type Security struct {
	TLS bool
	// CAFile verifies the brokers' certificates; the system pool when empty.
	CAFile string
	// CertFile and KeyFile are the client certificate, for mutual TLS.
	CertFile, KeyFile  string
	InsecureSkipVerify bool
	// SASLMechanism is "", PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or
	// OAUTHBEARER.
	SASLMechanism      string
	Username, Password string
	// PasswordFile holds the password instead (a mounted Secret): read
	// each time a connection's credentials are made, so a rotated file
	// is taken without a restart.
	PasswordFile string
	// AllowPlaintextSASL lets PLAIN, which sends the password as it is,
	// run without TLS; and OAUTHBEARER, which sends its token so.
	AllowPlaintextSASL bool
	// TokenFile (OAUTHBEARER) holds the bearer token, read at each
	// handshake; GoogleToken makes it from Application Default
	// Credentials, as Google's Managed Service for Apache Kafka takes it.
	TokenFile   string
	GoogleToken bool
}

// maxPasswordFile bounds what is read of a password file.
const maxPasswordFile = 64 << 10

// maxCAFile bounds a CA file: a bundle of a few hundred certificates.
const maxCAFile = 4 << 20

// password returns the SASL password: the file's first line when
// PasswordFile is set (keyfile.FirstLine).
func (s Security) password() (string, error) {
	if s.PasswordFile == "" {
		return s.Password, nil
	}
	return keyfile.FirstLine(s.PasswordFile, "--kafka-sasl-password-file", maxPasswordFile)
}

// Validate names the setting at fault.
func (s Security) Validate() error {
	var errs []error
	if (s.CertFile == "") != (s.KeyFile == "") {
		errs = append(errs, fmt.Errorf("--kafka-tls-cert %q and --kafka-tls-key %q: give both or neither", s.CertFile, s.KeyFile))
	}
	if !s.TLS && (s.CAFile != "" || s.CertFile != "" || s.InsecureSkipVerify) {
		errs = append(errs, errors.New("TLS files or --kafka-tls-insecure-skip-verify given without --kafka-tls"))
	}
	switch s.SASLMechanism {
	case "":
		if s.Username != "" {
			errs = append(errs, errors.New("--kafka-sasl-username given without --kafka-sasl-mechanism"))
		}
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if s.Password != "" && s.PasswordFile != "" {
			errs = append(errs, errors.New("KAFKA_SASL_PASSWORD and --kafka-sasl-password-file both given: give one"))
		}
		if pw, err := s.password(); err != nil {
			errs = append(errs, err)
		} else if s.Username == "" || pw == "" {
			errs = append(errs, fmt.Errorf("--kafka-sasl-mechanism %s needs --kafka-sasl-username and --kafka-sasl-password-file (or KAFKA_SASL_PASSWORD)", s.SASLMechanism))
		}
		if s.SASLMechanism == "PLAIN" && !s.TLS && !s.AllowPlaintextSASL {
			errs = append(errs, errors.New("--kafka-sasl-mechanism PLAIN without --kafka-tls sends the password in clear to anyone on the path: use --kafka-tls or SCRAM, or pass --allow-plaintext-sasl"))
		}
	case "OAUTHBEARER":
		switch {
		case s.Username != "" || s.Password != "":
			// A password file is left alone: the manifests name one
			// (optional) whatever the mechanism.
			errs = append(errs, errors.New("--kafka-sasl-mechanism OAUTHBEARER takes a token, not a user name or password: give --kafka-sasl-oauthbearer-token-file or --kafka-sasl-oauthbearer-google"))
		case (s.TokenFile == "") == !s.GoogleToken:
			errs = append(errs, errors.New("--kafka-sasl-mechanism OAUTHBEARER needs one of --kafka-sasl-oauthbearer-token-file and --kafka-sasl-oauthbearer-google"))
		case s.TokenFile != "":
			if _, err := fileToken(s.TokenFile)(context.Background()); err != nil {
				errs = append(errs, err)
			}
		}
		if !s.TLS && !s.AllowPlaintextSASL {
			errs = append(errs, errors.New("--kafka-sasl-mechanism OAUTHBEARER without --kafka-tls sends the token in clear to anyone on the path: use --kafka-tls, or pass --allow-plaintext-sasl"))
		}
	default:
		errs = append(errs, fmt.Errorf("--kafka-sasl-mechanism %q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", s.SASLMechanism))
	}
	if s.SASLMechanism != "OAUTHBEARER" && (s.TokenFile != "" || s.GoogleToken) {
		errs = append(errs, errors.New("--kafka-sasl-oauthbearer-* given without --kafka-sasl-mechanism OAUTHBEARER"))
	}
	return errors.Join(errs...)
}

func (s Security) tlsConfig() (*tls.Config, error) {
	if !s.TLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.InsecureSkipVerify} //nolint:gosec // an explicit operator choice
	if s.CAFile != "" {
		pem, err := bounded.ReadFile(s.CAFile, maxCAFile)
		if err != nil {
			return nil, fmt.Errorf("read Kafka CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--kafka-tls-ca %s holds no PEM certificate", s.CAFile)
		}
		cfg.RootCAs = pool
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load Kafka client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// CheckBroker connects to the broker at addr as the consumer does, as far
// as the transport goes: TCP and, when TLS is on, the handshake and an
// ApiVersions request, which any listener answers before SASL
// authentication. The request is what finds a client certificate the
// broker refuses: under TLS 1.3 the client's side of the handshake is over
// before the server has checked it, and the refusal arrives with the first
// read. SASL credentials are not checked. The error is the cause, without
// addr; BrokerRefused tells one that waiting cannot fix.
func (s Security) CheckBroker(ctx context.Context, addr string) error {
	cfg, err := s.tlsConfig()
	if err != nil {
		return &refusal{err}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			return op.Err
		}
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if cfg == nil {
		return nil
	}
	if cfg.ServerName == "" {
		// As kafka-go's dialer: the certificate must name the host of
		// the address the broker list gives.
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return tlsFailure(err)
	}
	if _, err := kafka.NewConn(tc, "", 0).ApiVersions(); err != nil {
		if tlsRefused(err) {
			return tlsFailure(err)
		}
		return fmt.Errorf("ApiVersions request over TLS: %w", err)
	}
	return nil
}

// refusal is a failure of CheckBroker that waiting cannot fix.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// BrokerRefused reports whether err, from CheckBroker, is a refusal of the
// TLS settings (a certificate that does not verify, either way, or TLS
// against a listener without it) or TLS files that do not load.
func BrokerRefused(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// tlsFailure is a handshake's error: a refusal when it is one.
func tlsFailure(err error) error {
	err = fmt.Errorf("TLS handshake: %w", err)
	if tlsRefused(err) {
		return &refusal{err}
	}
	return err
}

// tlsRefused reports whether err is the TLS layer turning the connection
// down rather than the network failing: the same will happen next time.
// crypto/tls says an alert from the peer as a net.OpError "remote error",
// one of its own as an AlertError.
func tlsRefused(err error) bool {
	var (
		verify *tls.CertificateVerificationError
		alert  tls.AlertError
		header tls.RecordHeaderError
		op     *net.OpError
	)
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &header) ||
		errors.As(err, &op) && op.Op == "remote error"
}

func (s Security) mechanism() (sasl.Mechanism, error) {
	switch {
	case s.SASLMechanism == "":
		return nil, nil
	case s.SASLMechanism == "OAUTHBEARER" && s.GoogleToken:
		return oauthBearer{token: googleToken()}, nil
	case s.SASLMechanism == "OAUTHBEARER":
		return oauthBearer{token: fileToken(s.TokenFile)}, nil
	}
	if _, err := s.credentials(); err != nil {
		return nil, err
	}
	if s.PasswordFile != "" {
		// Read at every handshake: a rotated file is taken by the next
		// connection, without a restart.
		return fileMechanism{s}, nil
	}
	return s.credentials()
}

// credentials makes the SASL mechanism with the password as it is now.
// Its errors never quote the password.
func (s Security) credentials() (sasl.Mechanism, error) {
	pw, err := s.password()
	if err != nil {
		return nil, err
	}
	switch s.SASLMechanism {
	case "PLAIN":
		return plain.Mechanism{Username: s.Username, Password: pw}, nil
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		algo := scram.SHA256
		if s.SASLMechanism == "SCRAM-SHA-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, s.Username, pw)
		if err != nil {
			// The library's error quotes the password.
			return nil, fmt.Errorf("SASL %s: the password cannot be prepared for SCRAM (SASLprep)", s.SASLMechanism)
		}
		return m, nil
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q", s.SASLMechanism)
}

// fileMechanism is a SASL mechanism whose password is read from its file
// at each handshake.
type fileMechanism struct{ s Security }

func (f fileMechanism) Name() string { return f.s.SASLMechanism }

func (f fileMechanism) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	m, err := f.s.credentials()
	if err != nil {
		return nil, nil, err
	}
	return m.Start(ctx)
}

// parts returns the TLS configuration and SASL mechanism, nil when unused.
func (s Security) parts() (*tls.Config, sasl.Mechanism, error) {
	t, err := s.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	m, err := s.mechanism()
	if err != nil {
		return nil, nil, err
	}
	return t, m, nil
}

// Dialer returns the dialer of the consumer group's connections. Their
// answers are checked before kafka-go reads them (checkedDial), and it does
// TLS itself, beneath the check.
func (s Security) Dialer() (*kafka.Dialer, error) {
	t, m, err := s.parts()
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DialFunc: checkedDial(t), SASLMechanism: m}, nil
}

// Transport returns a transport with the TLS and SASL settings: the
// consumer's fetches, the dead-letter producer, admin reads. Its answers
// are checked before kafka-go reads them (checkedDial), and it does TLS
// itself, beneath the check.
func (s Security) Transport() (*kafka.Transport, error) {
	t, m, err := s.parts()
	if err != nil {
		return nil, err
	}
	return &kafka.Transport{Dial: checkedDial(t), SASL: m}, nil
}

// AdminClient is a client for one-off reads of topic settings, its
// transport's metadata limited to topics (all when nil), each request a
// wait (Waits); done closes its connections.
func (s Security) AdminClient(brokers, topics []string) (client *kafka.Client, done func(), err error) {
	transport, err := s.Transport()
	if err != nil {
		return nil, nil, err
	}
	transport.MetadataTopics = topics
	return &kafka.Client{Addr: kafka.TCP(brokers...), Transport: Waits(transport), Timeout: 10 * time.Second}, transport.CloseIdleConnections, nil
}

// RegisterFlags declares the flags that fill s.
func (s *Security) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Kafka security")
	f.Bool(&s.TLS, "kafka-tls", "KAFKA_TLS", s.TLS, "connect to Kafka over TLS")
	f.String(&s.CAFile, "kafka-tls-ca", "KAFKA_TLS_CA_FILE", s.CAFile, "PEM file of the CA that signed the brokers' certificates (default: the system pool)")
	f.String(&s.CertFile, "kafka-tls-cert", "KAFKA_TLS_CERT_FILE", s.CertFile, "PEM client certificate, for mutual TLS")
	f.String(&s.KeyFile, "kafka-tls-key", "KAFKA_TLS_KEY_FILE", s.KeyFile, "PEM key of the client certificate")
	// A flag only, as --allow-plaintext-sasl.
	f.Bool(&s.InsecureSkipVerify, "kafka-tls-insecure-skip-verify", "", s.InsecureSkipVerify, "do not verify the brokers' certificates (testing only; a flag only: no environment variable)")
	f.String(&s.SASLMechanism, "kafka-sasl-mechanism", "KAFKA_SASL_MECHANISM", s.SASLMechanism, "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
	f.String(&s.TokenFile, "kafka-sasl-oauthbearer-token-file", envflag.Env, s.TokenFile, "OAUTHBEARER: file whose first line is the bearer token, which an agent beside the worker keeps fresh; read when connecting")
	f.Bool(&s.GoogleToken, "kafka-sasl-oauthbearer-google", envflag.Env, s.GoogleToken, "OAUTHBEARER: tokens from Application Default Credentials (Workload Identity on GKE), as Google's Managed Service for Apache Kafka takes them")
	f.String(&s.Username, "kafka-sasl-username", "KAFKA_SASL_USERNAME", s.Username, "SASL user name")
	f.String(&s.Password, "kafka-sasl-password", "KAFKA_SASL_PASSWORD", s.Password, "SASL password; prefer --kafka-sasl-password-file: a flag shows in process lists (a warning says so)")
	f.String(&s.PasswordFile, "kafka-sasl-password-file", "KAFKA_SASL_PASSWORD_FILE", s.PasswordFile, "file whose first line is the SASL password (a mounted Secret); read when connecting, so a rotated file needs no restart")
	// Deprecated: every user of the machine can read a process's
	// arguments, and a broker of a test has its CA for --kafka-tls-ca.
	f.Deprecated("kafka-sasl-password", "use --kafka-sasl-password-file, since a password on the command line shows to anyone who can list processes")
	f.Deprecated("kafka-tls-insecure-skip-verify", "give the brokers' CA with --kafka-tls-ca")
	// A flag only: a downgrade to a password in clear is chosen on the
	// command line, not inherited from an environment.
	f.Bool(&s.AllowPlaintextSASL, "allow-plaintext-sasl", "", s.AllowPlaintextSASL, "allow SASL PLAIN without --kafka-tls (the password crosses the network in clear)")
}
