package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/telemetry"
	"github.com/cellttl/cellttl/tenants"
)

var errFlagHelp = flag.ErrHelp

// meterName scopes the worker's metrics.
const meterName = "github.com/cellttl/cellttl"

// common are the flags of every command that touches Bigtable.
type common struct {
	tenantsFile       string
	project, instance string
	table, family     string
	appProfile        string
	logFormat         string
	logLevel          string
}

func (c *common) register(f *flags) {
	f.String(&c.tenantsFile, "tenants", "TENANTS_FILE", "tenants.yaml", "per-tenant TTL file")
	f.String(&c.project, "project", "BIGTABLE_PROJECT", "", "Google Cloud project of the Bigtable instance (default \"local\" with BIGTABLE_EMULATOR_HOST)")
	f.String(&c.instance, "instance", "BIGTABLE_INSTANCE", "", "Bigtable instance (default \"local\" with BIGTABLE_EMULATOR_HOST)")
	f.String(&c.table, "table", "BIGTABLE_TABLE", "clicks", "Bigtable table")
	f.String(&c.appProfile, "app-profile", "BIGTABLE_APP_PROFILE", "", "Bigtable app profile of data requests (default: the instance's default profile)")
	f.String(&c.family, "family", "BIGTABLE_FAMILY", "c", "column family of the event and written_at columns")
	f.String(&c.logFormat, "log-format", "LOG_FORMAT", "json", "log format: json or text")
	f.String(&c.logLevel, "log-level", "LOG_LEVEL", "info", "log level: debug, info, warn or error")
}

// resolve fills defaults that depend on the environment and checks the rest.
func (c *common) resolve() error {
	if os.Getenv("BIGTABLE_EMULATOR_HOST") != "" {
		if c.project == "" {
			c.project = "local"
		}
		if c.instance == "" {
			c.instance = "local"
		}
	}
	var errs []error
	if c.project == "" {
		errs = append(errs, errors.New("--project is required (or BIGTABLE_PROJECT)"))
	}
	if c.instance == "" {
		errs = append(errs, errors.New("--instance is required (or BIGTABLE_INSTANCE)"))
	}
	if c.table == "" {
		errs = append(errs, errors.New("--table must not be empty"))
	}
	if c.family == "" {
		errs = append(errs, errors.New("--family must not be empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return &exitError{code: 2, err: err}
	}
	return nil
}

func (c *common) target() sink.Target { return sink.Target{Table: c.table, Family: c.family} }

// bigtableClients opens the data and admin clients. BIGTABLE_EMULATOR_HOST,
// when set, points both at an emulator, as the client library defines.
func (c *common) bigtableClients(ctx context.Context) (*bigtable.Client, *bigtable.AdminClient, error) {
	dc, err := bigtable.NewClientWithConfig(ctx, c.project, c.instance, bigtable.ClientConfig{AppProfile: c.appProfile})
	if err != nil {
		return nil, nil, fmt.Errorf("bigtable client for %s/%s: %w", c.project, c.instance, err)
	}
	ac, err := bigtable.NewAdminClient(ctx, c.project, c.instance)
	if err != nil {
		dc.Close()
		return nil, nil, fmt.Errorf("bigtable admin client for %s/%s: %w", c.project, c.instance, err)
	}
	return dc, ac, nil
}

// session is what a command working on the table needs: the tenants config
// and Bigtable clients.
type session struct {
	cfg *tenants.Config
	dc  *bigtable.Client
	ac  *bigtable.AdminClient
}

func (s *session) Close() {
	s.dc.Close()
	s.ac.Close()
}

// open resolves the flags, loads the tenants file (exit status 2 when it is
// invalid) and opens the clients.
func (c *common) open(ctx context.Context) (*session, error) {
	if err := c.resolve(); err != nil {
		return nil, err
	}
	cfg, err := tenants.Load(c.tenantsFile)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	dc, ac, err := c.bigtableClients(ctx)
	if err != nil {
		return nil, err
	}
	return &session{cfg: cfg, dc: dc, ac: ac}, nil
}

// describePolicy says what GC rule a policy needs and why.
func describePolicy(p *expiry.Policy) string {
	return fmt.Sprintf("strategy %s with default_ttl %s", p.Strategy, duration.Format(p.DefaultTTL))
}

func runSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var opts sink.SetupOptions
	f := newFlags("worker setup", "worker setup: create the table and column family with the GC rule the strategy needs.", stderr)
	c.register(f)
	f.Bool(&opts.UpdateGCPolicy, "update-gc-policy", "UPDATE_GC_POLICY", false, "replace the family's GC rule when it differs")
	f.Bool(&opts.Force, "force", "FORCE", false, "allow the one-second strategy's 1s max-age on a family that already holds cells (they will be deleted)")
	if err := parse(f, args); err != nil {
		return err
	}
	s, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := s.cfg
	want := cfg.Policy.GCMaxAge()
	res, err := sink.Setup(ctx, s.ac, s.dc, c.target(), want, opts)
	if err != nil {
		return fmt.Errorf("setup for %s: %w", describePolicy(cfg.Policy), err)
	}
	rule := sink.DescribeGC(bigtable.MaxAgePolicy(want))
	switch {
	case res.CreatedFamily:
		fmt.Fprintf(stdout, "created family %s (table created: %t) with GC rule %q for %s\n", c.target(), res.CreatedTable, rule, describePolicy(cfg.Policy))
	case res.UpdatedRule:
		fmt.Fprintf(stdout, "changed GC rule of %s from %q to %q for %s\n", c.target(), res.OldRule, rule, describePolicy(cfg.Policy))
	default:
		fmt.Fprintf(stdout, "family %s already has GC rule %q for %s; nothing to do\n", c.target(), rule, describePolicy(cfg.Policy))
	}
	return nil
}

// runOptions are the flags of worker run.
type runOptions struct {
	common
	brokers, topic, group, dlqTopic string
	commitInterval                  time.Duration
	sessionTimeout                  time.Duration
	reloadInterval                  time.Duration
	security                        ingest.Security
	adminAddr                       string
	writeTimeout                    time.Duration
	maxInflightBytes                int64
	offsetOutOfRange                string
	offsetReset                     ingest.OffsetReset
	pipe                            pipeline.Config
	// onPipeline, when set, is handed the pipeline before it runs (the demo
	// reads its stats).
	onPipeline func(*pipeline.Pipeline)
}

func (o *runOptions) register(f *flags) {
	o.common.register(f)
	d := pipeline.DefaultConfig()
	f.String(&o.brokers, "brokers", "KAFKA_BROKERS", "", "comma-separated Kafka bootstrap brokers (required)")
	f.String(&o.topic, "topic", "KAFKA_TOPIC", "clicks", "topic of click events")
	f.String(&o.group, "group", "KAFKA_GROUP", "cellttl", "consumer group; workers in one group share the topic's partitions")
	f.String(&o.dlqTopic, "dlq-topic", "KAFKA_DLQ_TOPIC", "", "dead-letter topic (default <topic>.dlq)")
	f.String(&o.adminAddr, "admin-addr", "ADMIN_ADDR", ":8080", "address of /healthz, /readyz, /status and /metrics (empty: off)")
	f.Bool(&o.security.TLS, "kafka-tls", "KAFKA_TLS", false, "connect to Kafka over TLS")
	f.String(&o.security.CAFile, "kafka-tls-ca", "KAFKA_TLS_CA_FILE", "", "PEM file of the CA that signed the brokers' certificates (default: the system pool)")
	f.String(&o.security.CertFile, "kafka-tls-cert", "KAFKA_TLS_CERT_FILE", "", "PEM client certificate, for mutual TLS")
	f.String(&o.security.KeyFile, "kafka-tls-key", "KAFKA_TLS_KEY_FILE", "", "PEM key of the client certificate")
	f.Bool(&o.security.InsecureSkipVerify, "kafka-tls-insecure-skip-verify", "KAFKA_TLS_INSECURE_SKIP_VERIFY", false, "do not verify the brokers' certificates (testing only)")
	f.String(&o.security.SASLMechanism, "kafka-sasl-mechanism", "KAFKA_SASL_MECHANISM", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	f.String(&o.security.Username, "kafka-sasl-username", "KAFKA_SASL_USERNAME", "", "SASL user name")
	f.String(&o.security.Password, "kafka-sasl-password", "KAFKA_SASL_PASSWORD", "", "SASL password; prefer the environment variable, flags show in process lists")
	f.Duration(&o.commitInterval, "commit-interval", "COMMIT_INTERVAL", time.Second, "how often settled offsets are committed")
	f.Duration(&o.reloadInterval, "tenants-reload-interval", "TENANTS_RELOAD_INTERVAL", 5*time.Second, "how often the tenants file is checked for changes (SIGHUP checks at once)")
	f.Duration(&o.sessionTimeout, "session-timeout", "KAFKA_SESSION_TIMEOUT", 30*time.Second, "how long the group waits for a silent member before reassigning its partitions (the broker allows 6s..5m by default)")
	f.Duration(&o.writeTimeout, "write-timeout", "WRITE_TIMEOUT", 30*time.Second, "bound on one Bigtable bulk write attempt before it is retried")
	f.Int(&o.pipe.FlushRows, "flush-rows", "FLUSH_ROWS", d.FlushRows, "flush a batch at this many rows")
	f.Int(&o.pipe.FlushBytes, "flush-bytes", "FLUSH_BYTES", d.FlushBytes, "flush a batch at this many bytes of event values")
	f.Duration(&o.pipe.FlushInterval, "flush-interval", "FLUSH_INTERVAL", d.FlushInterval, "flush a batch when its first row is this old")
	f.Int(&o.pipe.Writers, "writers", "WRITERS", d.Writers, "batches written to Bigtable concurrently")
	f.Int64(&o.maxInflightBytes, "max-inflight-bytes", "MAX_INFLIGHT_BYTES", 64<<20, "bytes of events fetched and not yet settled, over all partitions; fetching pauses beyond")
	f.String(&o.offsetOutOfRange, "offset-out-of-range", "OFFSET_OUT_OF_RANGE", "earliest", "when a committed offset lies outside the log (topic recreated, retention passed it): earliest, latest or fail")
	f.Duration(&o.pipe.DrainTimeout, "drain-timeout", "DRAIN_TIMEOUT", d.DrainTimeout, "on SIGTERM, time allowed to flush, commit and leave the group")
	f.Int(&o.pipe.Decoder.MaxBytes, "max-event-bytes", "MAX_EVENT_BYTES", d.Decoder.MaxBytes, "larger events go to the dead-letter topic")
	f.Duration(&o.pipe.Decoder.MaxClockSkew, "max-clock-skew", "MAX_CLOCK_SKEW", d.Decoder.MaxClockSkew, "an occurred_at further after the Kafka record timestamp is replaced by the record timestamp")
}

func (o *runOptions) resolve() ([]string, error) {
	if err := o.common.resolve(); err != nil {
		return nil, err
	}
	brokers, err := ingest.SplitBrokers(o.brokers)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	if o.dlqTopic == "" {
		o.dlqTopic = o.topic + ".dlq"
	}
	if o.dlqTopic == o.topic {
		return nil, &exitError{code: 2, err: fmt.Errorf("--dlq-topic %q is the input topic", o.dlqTopic)}
	}
	if err := o.security.Validate(); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	if o.reloadInterval <= 0 {
		return nil, &exitError{code: 2, err: fmt.Errorf("--tenants-reload-interval %s: must be positive", o.reloadInterval)}
	}
	if err := o.pipe.Validate(); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	if o.maxInflightBytes < int64(o.pipe.Decoder.MaxBytes)+ingest.MessageOverhead {
		return nil, &exitError{code: 2, err: fmt.Errorf("--max-inflight-bytes %d: must hold at least one event of --max-event-bytes %d", o.maxInflightBytes, o.pipe.Decoder.MaxBytes)}
	}
	if o.offsetReset, err = ingest.ParseOffsetReset(o.offsetOutOfRange); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return brokers, nil
}

func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	var o runOptions
	f := newFlags("worker run", "worker run: consume click events and write them with per-tenant TTLs.", stderr)
	o.register(f)
	if err := parse(f, args); err != nil {
		return err
	}
	brokers, err := o.resolve()
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	s, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := s.cfg
	if err := sink.CheckGC(ctx, s.ac, o.target(), cfg.Policy.GCMaxAge()); err != nil {
		hint := ""
		if sink.IsMismatch(err) {
			hint = "; `worker setup --update-gc-policy` changes the rule, see `worker check` first"
		}
		return fmt.Errorf("refusing to start: %w (the tenants file asks for %s%s)", err, describePolicy(cfg.Policy), hint)
	}
	limitMemory(o.maxInflightBytes, log)
	tel, err := telemetry.Setup(ctx, version())
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "err", err)
		}
	}()
	return serve(ctx, &o, brokers, cfg, s.dc, tel.MetricsHandler(), log)
}

// memoryOverhead is what the Go heap may hold beyond --max-inflight-bytes:
// the runtime, the clients' buffers, the metrics, and room for the garbage
// collector to work. The process also maps its binary (about 35 MiB
// resident): measured, peak RSS stays within --max-inflight-bytes + 64 MiB
// (RELIABILITY.md).
const memoryOverhead = 24 << 20

// limitMemory gives the garbage collector a soft limit of --max-inflight-bytes
// plus memoryOverhead, unless GOMEMLIMIT sets one: without it the heap may
// grow to twice what is live before a collection, and the event bytes the
// bound holds would count twice in the process's memory. An operator's
// GOMEMLIMIT (the Deployment derives it from the pod's limit) wins.
func limitMemory(maxInflight int64, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
		return
	}
	limit := maxInflight + memoryOverhead
	debug.SetMemoryLimit(limit)
	log.Info("memory limit for the garbage collector", "bytes", limit, "max_inflight_bytes", maxInflight)
}
