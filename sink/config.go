package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"

	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
)

// TableConfig is where cellttl's table is, as the flags of every command
// that touches Bigtable give it.
type TableConfig struct {
	Project, Instance string
	AppProfile        string
	Table, Family     string
	// Erasures names the erasure ledger's table; "" is Table + "-erasures".
	Erasures string
	// ClientMetrics turns the Go client's built-in metrics on
	// (RegisterClientMetricsFlag).
	ClientMetrics bool
}

// DefaultTableConfig returns the defaults the flags document.
func DefaultTableConfig() TableConfig { return TableConfig{Table: "clicks", Family: "c"} }

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *TableConfig) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Bigtable")
	f.String(&c.Project, "project", "BIGTABLE_PROJECT", c.Project, "Google Cloud project of the Bigtable instance (required; \"local\" when BIGTABLE_EMULATOR_HOST points at an emulator)")
	f.String(&c.Instance, "instance", "BIGTABLE_INSTANCE", c.Instance, "Bigtable instance (required; \"local\" when BIGTABLE_EMULATOR_HOST points at an emulator)")
	f.String(&c.Table, "table", "BIGTABLE_TABLE", c.Table, "Bigtable table")
	f.String(&c.AppProfile, "app-profile", "BIGTABLE_APP_PROFILE", c.AppProfile, "Bigtable app profile of data requests (default: the instance's default profile)")
	f.String(&c.Family, "family", "BIGTABLE_FAMILY", c.Family, "column family of the event and written_at columns")
	f.String(&c.Erasures, "erasure-table", "BIGTABLE_ERASURE_TABLE", c.Erasures, "table of the erasure ledger worker forget records and every worker obeys (default: the --table name followed by -erasures)")
}

// RegisterClientMetricsFlag declares --bigtable-client-metrics, worker
// run's alone: its traffic is what Google's Bigtable dashboards chart,
// while the jobs beside it are short. Off by default: the client exports
// to Cloud Monitoring on its own, which needs a right (writing time
// series to the project) no identity of cellttl's holds unless granted,
// and cellttl's own metrics already carry the write latency and errors.
func (c *TableConfig) RegisterClientMetricsFlag(f *envflag.FlagSet) {
	f.Section("Bigtable")
	f.Bool(&c.ClientMetrics, "bigtable-client-metrics", envflag.Env, c.ClientMetrics,
		"export the Bigtable client's built-in metrics (operation and attempt latencies, retries, server latency, connectivity errors: what the Bigtable dashboards of the Google Cloud console chart) to Cloud Monitoring; needs monitoring.timeSeries.create on the project (roles/monitoring.metricWriter). Always off against an emulator")
}

// ErasureTable is the erasure ledger's table.
func (c TableConfig) ErasureTable() string {
	if c.Erasures != "" {
		return c.Erasures
	}
	return c.Table + "-erasures"
}

// Resolve fills the project and instance of an emulator ("local", when
// BIGTABLE_EMULATOR_HOST is set and they are not given), then validates,
// naming the flag at fault.
func (c *TableConfig) Resolve() error {
	if os.Getenv("BIGTABLE_EMULATOR_HOST") != "" {
		if c.Project == "" {
			c.Project = "local"
		}
		if c.Instance == "" {
			c.Instance = "local"
		}
	}
	var errs []error
	if c.Project == "" {
		errs = append(errs, errors.New("--project is required (or CELLTTL_PROJECT)"))
	}
	if c.Instance == "" {
		errs = append(errs, errors.New("--instance is required (or CELLTTL_INSTANCE)"))
	}
	if c.Table == "" {
		errs = append(errs, errors.New("--table must not be empty"))
	}
	if c.Family == "" {
		errs = append(errs, errors.New("--family must not be empty"))
	}
	return errors.Join(errs...)
}

// Configured reports whether a Bigtable is named at all: a project or an
// instance, or an emulator.
func (c TableConfig) Configured() bool {
	return c.Project != "" || c.Instance != "" || os.Getenv("BIGTABLE_EMULATOR_HOST") != ""
}

// Target is the family the config names.
func (c TableConfig) Target() Target { return Target{Table: c.Table, Family: c.Family} }

// Clients opens the data and admin clients. BIGTABLE_EMULATOR_HOST, when
// set, points both at an emulator, as the client library defines.
func (c TableConfig) Clients(ctx context.Context) (*bigtable.Client, *bigtable.AdminClient, error) {
	wait := waitfor.Begin(ctx, waitfor.Bigtable, "connect")
	defer wait.End(nil)
	dc, err := bigtable.NewClientWithConfig(ctx, c.Project, c.Instance, bigtable.ClientConfig{AppProfile: c.AppProfile, MetricsProvider: c.metricsProvider()})
	if err != nil {
		return nil, nil, fmt.Errorf("bigtable client for %s/%s: %w", c.Project, c.Instance, err)
	}
	ac, err := bigtable.NewAdminClient(ctx, c.Project, c.Instance)
	if err != nil {
		dc.Close()
		return nil, nil, fmt.Errorf("bigtable admin client for %s/%s: %w", c.Project, c.Instance, err)
	}
	return dc, ac, nil
}

// metricsProvider is the client's built-in metrics: Cloud Monitoring's
// exporter when ClientMetrics is set, else none. The client itself turns
// them off against an emulator, which has no Cloud Monitoring.
func (c TableConfig) metricsProvider() bigtable.MetricsProvider {
	if c.ClientMetrics && os.Getenv("BIGTABLE_EMULATOR_HOST") == "" {
		return bigtable.DefaultMetricsProvider{}
	}
	return bigtable.NoopMetricsProvider{}
}

// ReadAppProfile reads the app profile of the data requests (the
// instance's default when --app-profile is not set), which needs
// bigtable.appProfiles.get on the instance: how it routes tells whether
// its writes reach other clusters later.
func (c TableConfig) ReadAppProfile(ctx context.Context) (*adminpb.AppProfile, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	iac, err := bigtable.NewInstanceAdminClient(ctx, c.Project)
	if err != nil {
		return nil, fmt.Errorf("bigtable instance admin client for %s: %w", c.Project, err)
	}
	defer iac.Close()
	name := cmp.Or(c.AppProfile, "default")
	wait := waitfor.Begin(ctx, waitfor.Bigtable, "admin: read app profile "+name)
	ap, err := iac.GetAppProfile(ctx, c.Instance, name)
	if err = wait.End(err); err != nil {
		return nil, fmt.Errorf("app profile %s of %s/%s: %w", name, c.Project, c.Instance, err)
	}
	return ap, nil
}

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *WriterConfig) RegisterFlags(f *envflag.FlagSet) {
	c.RegisterTimeoutFlag(f)
	f.Duration(&c.RuleCheckInterval, "gc-rule-check-interval", "GC_RULE_CHECK_INTERVAL", c.RuleCheckInterval, "how often the family's GC rule is read again: writes wait while it disagrees with the tenants file")
}

// RegisterTimeoutFlag declares --write-timeout alone: for worker forget,
// whose wait between its passes is the workers' bound, which it includes.
func (c *WriterConfig) RegisterTimeoutFlag(f *envflag.FlagSet) {
	f.Section("Bigtable")
	f.Advanced()
	f.Duration(&c.AttemptTimeout, "write-timeout", "WRITE_TIMEOUT", c.AttemptTimeout, "bound on one Bigtable bulk write attempt before it is retried")
}

// Validate checks the settings, naming the flag at fault.
func (c WriterConfig) Validate() error {
	var errs []error
	if c.AttemptTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--write-timeout %s: must be positive", c.AttemptTimeout))
	}
	if c.RuleCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--gc-rule-check-interval %s: must be positive", c.RuleCheckInterval))
	}
	return errors.Join(errs...)
}
