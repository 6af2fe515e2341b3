package main

// The helpers more than one command uses: the commands' own files keep
// what is theirs alone.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/retention/forget"
	"github.com/cellttl/cellttl/schema"
	"github.com/cellttl/cellttl/schema/registry"
)

// Exit status of a retention command stopped by a signal: run it again
// (with --resume) to finish.
const exitInterrupted = 3

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// shardNote names the shard in the summary when the work is split.
func shardNote(s retention.Shard) string {
	if s.Count <= 1 {
		return ""
	}
	return " (shard " + s.String() + ")"
}

// parseWhen reads an RFC 3339 time or a duration before now.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := duration.Parse(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time or a duration ago such as 90m or 2d", flag, s)
	}
	return now.Add(-d), nil
}

// operator names who runs the command, for the audit trail.
func operator() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}

// openSchemas sets pipe's decoder to read values through the schema
// registry when --value-format asks for one; nil, and JSON, otherwise.
// Close the schemas when done.
func openSchemas(ctx context.Context, cfg registry.Config, pipe *pipeline.Config, mp metric.MeterProvider, log *slog.Logger) (*registry.Schemas, error) {
	if cfg.ValueFormat() == schema.JSON {
		return nil, nil
	}
	s, err := registry.New(cfg, pipe.Decoder.Mapping, mp, log)
	if err != nil {
		return nil, err
	}
	pipe.Decoder.Values, pipe.Schemas = s, s
	log.Info("values are read through the schema registry", "value_format", cfg.Format, "schema_registry", s.URL())
	// Asked at start, so that a wrong URL or refused credentials show now,
	// not at the first value; /readyz asks again while it does not answer.
	// Under a command that bounds its waits (redrive), ctx's watch does.
	if err := s.Check(ctx); err != nil {
		log.Error("the schema registry does not answer as one: values that need a schema will wait until it does", "err", err,
			"fix", "check --schema-registry-url (the path of its Confluent-compatible API), its credentials and TLS files")
	}
	return s, nil
}

// The values of --replication.
const (
	replicationWait   = "wait"
	replicationSingle = "single-cluster"
)

func checkReplication(v string) error {
	if v != replicationWait && v != replicationSingle {
		return fmt.Errorf("--replication %q: want %s or %s", v, replicationWait, replicationSingle)
	}
	return nil
}

// replicationOf is how forget and offboard account for a replicated
// instance, as --replication says: they wait for consistency, or check the
// operator's word that everything routes to one cluster.
func replicationOf(ctx context.Context, mode string, o *tableOptions, s *session, log *slog.Logger) (forget.Replication, error) {
	repl := forget.Replication{Table: o.table.Table, Wait: s.ac.WaitForReplication}
	if mode == replicationSingle {
		ap, err := o.table.ReadAppProfile(ctx)
		repl.Wait = nil
		if repl.Statement, err = forget.SingleCluster(o.table.AppProfile, ap, err, log); err != nil {
			return repl, err
		}
	}
	return repl, nil
}
