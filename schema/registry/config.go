// Package registry reads event values through a Confluent-compatible
// schema registry (--value-format avro, protobuf or json-schema): the
// registry's HTTP client (franz-go's pkg/sr) with basic auth and TLS, the
// schemas fetched by id with their references, compiled once by package
// schema and kept in a bounded cache, and the wait while the registry
// cannot answer: a record whose schema cannot be fetched is held, never
// dead-lettered, and the worker says so (/readyz, a metric, the log).
package registry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/bounded"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/keyfile"
	"github.com/cellttl/cellttl/schema"
)

// Config is the value format and how the registry is reached.
type Config struct {
	// Format is --value-format: json (no registry), avro, protobuf or
	// json-schema.
	Format string
	URL    string
	// Username and PasswordFile are HTTP basic auth; the password is read
	// from its file (a mounted Secret) at each request, so a rotated file
	// needs no restart, and never comes from a flag or the environment.
	Username, PasswordFile string
	// CAFile verifies the registry's certificate (the system pool when
	// empty); CertFile and KeyFile are a client certificate.
	CAFile, CertFile, KeyFile string
	// CacheSize bounds the compiled schemas kept, by id.
	CacheSize int
	// Timeout bounds each request to the registry: a registry that
	// accepts connections and never answers is retried (the worker) or
	// reported (worker read) rather than waited on for good.
	Timeout time.Duration
}

// DefaultConfig is plain JSON, no registry.
func DefaultConfig() Config {
	return Config{Format: "json", CacheSize: 1000, Timeout: defaultTimeout}
}

const defaultTimeout = 10 * time.Second

// RegisterFlags declares the flags that fill c, in a section of their own.
func (c *Config) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Value format and schema registry")
	f.Choice(&c.Format, "value-format", envflag.Env, c.Format, "how event values are written: json (plain JSON, the contract's), or avro, protobuf or json-schema framed for a Confluent-compatible schema registry (magic byte 0, 4-byte schema id), which --schema-registry-url names", "json", "avro", "protobuf", "json-schema")
	f.String(&c.URL, "schema-registry-url", envflag.Env, c.URL, "base URL of the schema registry's Confluent-compatible API (Apicurio: http://HOST:8080/apis/ccompat/v7), without credentials")
	f.String(&c.Username, "schema-registry-username", envflag.Env, c.Username, "user name for the registry's HTTP basic auth")
	f.String(&c.PasswordFile, "schema-registry-password-file", envflag.Env, c.PasswordFile, "file whose first line is the registry password (a mounted Secret); read at each request, so a rotated file needs no restart")
	f.String(&c.CAFile, "schema-registry-tls-ca", envflag.Env, c.CAFile, "PEM file of the CA that signed the registry's certificate (default: the system pool)")
	f.String(&c.CertFile, "schema-registry-tls-cert", envflag.Env, c.CertFile, "PEM client certificate, for mutual TLS with the registry")
	f.String(&c.KeyFile, "schema-registry-tls-key", envflag.Env, c.KeyFile, "PEM key of the registry client certificate")
	f.Advanced()
	f.Int(&c.CacheSize, "schema-cache-size", envflag.Env, c.CacheSize, "compiled schemas kept, by id (each schema evolution adds one); beyond, one is dropped and fetched again when next needed")
	f.Duration(&c.Timeout, "schema-registry-timeout", envflag.Env, c.Timeout, "bound on each request to the schema registry; one that takes longer is tried again (worker run) or reported (worker read)")
}

// ValueFormat is the format Format names.
func (c Config) ValueFormat() schema.Format {
	f, _ := schema.ParseFormat(c.Format)
	return f
}

// Validate names the flag at fault; it reads the password file and the
// TLS files, so that a wrong path stops start-up rather than hold events.
func (c Config) Validate() error {
	var errs []error
	format, err := schema.ParseFormat(c.Format)
	if err != nil {
		return fmt.Errorf("--value-format %q: %w", c.Format, err)
	}
	given := c.URL != "" || c.Username != "" || c.PasswordFile != "" || c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
	if format == schema.JSON {
		if given {
			errs = append(errs, errors.New("--schema-registry-* given with --value-format json, which reads no registry: give --value-format avro, protobuf or json-schema"))
		}
		return errors.Join(errs...)
	}
	if c.URL == "" {
		errs = append(errs, fmt.Errorf("--value-format %s needs --schema-registry-url", format))
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--schema-registry-url %q: want http(s)://HOST[:PORT][/PATH]", redact(c.URL)))
	} else if u.User != nil {
		// A password in a URL lands in process lists and logs.
		errs = append(errs, errors.New("--schema-registry-url holds credentials: give --schema-registry-username and --schema-registry-password-file"))
	} else if u.Scheme == "http" && (c.CAFile != "" || c.CertFile != "") {
		errs = append(errs, fmt.Errorf("--schema-registry-tls-* given with an http:// --schema-registry-url %q", c.URL))
	}
	if (c.Username == "") != (c.PasswordFile == "") {
		errs = append(errs, errors.New("--schema-registry-username and --schema-registry-password-file: give both or neither"))
	} else if c.PasswordFile != "" {
		if _, err := password(c.PasswordFile); err != nil {
			errs = append(errs, err)
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, fmt.Errorf("--schema-registry-tls-cert %q and --schema-registry-tls-key %q: give both or neither", c.CertFile, c.KeyFile))
	}
	if _, err := c.tlsConfig(); err != nil {
		errs = append(errs, err)
	}
	if c.CacheSize < 1 {
		errs = append(errs, fmt.Errorf("--schema-cache-size %d: must be at least 1", c.CacheSize))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--schema-registry-timeout %s: must be more than 0", c.Timeout))
	}
	return errors.Join(errs...)
}

// redact drops what a URL may hold of a secret, for errors and logs: what
// lies before its host (credentials), its query (a token) and fragment.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User == nil && u.RawQuery == "" && u.Fragment == "" {
			return raw
		}
		u.User, u.RawQuery, u.Fragment, u.RawFragment = nil, "", "", ""
		return u.String()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		raw = "…" + raw[i:]
	}
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	return raw
}

func (c Config) tlsConfig() (*tls.Config, error) {
	if c.CAFile == "" && c.CertFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := bounded.ReadFile(c.CAFile, maxCAFile)
		if err != nil {
			return nil, fmt.Errorf("--schema-registry-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--schema-registry-tls-ca %s holds no PEM certificate", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" && c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--schema-registry-tls-cert and --schema-registry-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// maxPasswordFile bounds what is read of a password file.
const maxPasswordFile = 64 << 10

// maxCAFile bounds a CA file: a bundle of a few hundred certificates.
const maxCAFile = 4 << 20

// password reads the first line of the password file (keyfile.FirstLine).
func password(path string) (string, error) {
	return keyfile.FirstLine(path, "--schema-registry-password-file", maxPasswordFile)
}
