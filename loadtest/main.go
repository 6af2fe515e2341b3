// Command loadtest drives the worker with synthetic click events and checks
// what it wrote.
//
//	go run ./loadtest --embedded --count 200000        # in-process Kafka and emulator, a worker process
//	go run ./loadtest --rate 20000 --duration 5m       # against a running worker (docs/operations.md)
//	go run ./loadtest bench --events 300000            # the ceilings and the worker in one run (BENCHMARKS.md)
//	go run ./loadtest ledger --erasures 1000000        # a worker on an erasure ledger of three years (BENCHMARKS.md)
//	go run ./loadtest rollout --worker-bin ./worker    # a rolling restart of a group under load (RELIABILITY.md)
//
// It produces at a target rate (or as fast as it can) for a count or a
// duration, with a tenant mix, Zipf-skewed users, a payload size and a share
// of malformed events; prints a progress line each second; then verifies
// through the reader that every valid event is in Bigtable exactly once
// with the contract's timestamp and every invalid one is in the dead-letter
// topic; and writes a Markdown report with a chart. It exits 1 on any
// mismatch.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/loadtest/bench"
	"github.com/cellttl/cellttl/loadtest/rollout"
	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/loadtest/verify"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		if errors.Is(err, verify.ErrMismatch) {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

type options struct {
	embedded     bool
	brokers      string
	topic        string
	dlqTopic     string
	tenantsFile  string
	weights      string
	rate         int
	count        int
	duration     time.Duration
	users        uint64
	zipfS        float64
	payloadBytes int
	malformed    float64
	statusURL    string
	project      string
	instance     string
	table        string
	family       string
	reportDir    string
	verify       bool
	settle       time.Duration
	seed         uint64
	workerFlags  string
	shape        synth.Shape
	valueFormat  string
	registryURL  string
	partitions   int
	emulator     *inproc.Bigtable // the embedded emulator, with --embedded
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "bench" {
		return runBench(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "ledger" {
		return runLedger(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "rollout" {
		return runRollout(ctx, args[1:], stdout)
	}
	var o options
	fs := envflag.NewUnprefixed("loadtest", "loadtest: drive the worker with synthetic click events and check what it wrote.", os.Stderr)
	fs.Bool(&o.embedded, "embedded", "", false, "start in-process Kafka (kfake) and Bigtable emulator (bttest) and a worker process against them")
	fs.String(&o.brokers, "brokers", "CELLTTL_BROKERS", "", "Kafka brokers of the worker under test")
	fs.Renamed("brokers", "KAFKA_BROKERS")
	fs.String(&o.topic, "topic", "CELLTTL_TOPIC", "clicks", "topic the worker consumes")
	fs.String(&o.dlqTopic, "dlq-topic", "", "", "dead-letter topic (default <topic>.dlq)")
	fs.String(&o.tenantsFile, "tenants", "CELLTTL_TENANTS", "tenants.yaml", "the worker's tenants file: the tenant mix and the expected timestamps")
	fs.String(&o.weights, "weights", "", "", `tenant weights, e.g. "acme=5,globex=1,*=2" (* is a tenant the file does not list); others weigh 1`)
	fs.Int(&o.rate, "rate", "", 0, "events per second (0: as fast as possible)")
	fs.Int(&o.count, "count", "", 0, "events to produce (0: until --duration)")
	fs.Duration(&o.duration, "duration", "", time.Minute, "how long to produce when --count is 0")
	fs.Uint64(&o.users, "users", "", synth.DefaultUsers, "distinct users")
	fs.Float64(&o.zipfS, "zipf", "", synth.DefaultZipfS, "Zipf exponent of the user distribution (> 1; larger is more skewed)")
	fs.BytesInt(&o.payloadBytes, "payload-bytes", "", 200, "bytes of filler per event")
	fs.Float64(&o.malformed, "malformed", "", 0.01, "share of malformed events")
	fs.String(&o.statusURL, "worker-status", "", "http://127.0.0.1:8080/status", "the worker's /status, for written counts and lag")
	fs.String(&o.project, "project", "CELLTTL_PROJECT", "local", "Bigtable project")
	fs.String(&o.instance, "instance", "CELLTTL_INSTANCE", "local", "Bigtable instance")
	fs.String(&o.table, "table", "CELLTTL_TABLE", "clicks", "Bigtable table")
	fs.String(&o.family, "family", "CELLTTL_FAMILY", "c", "column family")
	// The worker's names, so that one environment serves both; the names
	// loadtest read before, for this release, with a warning.
	fs.Renamed("project", "BIGTABLE_PROJECT")
	fs.Renamed("instance", "BIGTABLE_INSTANCE")
	fs.Renamed("table", "BIGTABLE_TABLE")
	fs.String(&o.reportDir, "report-dir", "", "", "where the report goes (default loadtest-report/<run id>)")
	fs.Bool(&o.verify, "verify", "", true, "check Bigtable and the dead-letter topic afterwards")
	fs.Duration(&o.settle, "settle-timeout", "", 5*time.Minute, "how long to wait for the worker to catch up")
	fs.Uint64(&o.seed, "seed", "", 0, "random seed (0: from the clock)")
	fs.String(&o.workerFlags, "worker-flags", "", "", "extra flags for the embedded worker, space-separated")
	o.shape = synth.Contract()
	fs.Value(synth.ShapeFlag(&o.shape), "shape", "", "event layout: contract; nested (customer_id, context.session.id, context.user.id, epoch-ms ts), header (tenant in header x-tenant) or own-ttl (the contract, with an own TTL in header x-ttl on three events in four), which the worker reads with the mapping flags printed at start (--embedded passes them)")
	fs.String(&o.valueFormat, "value-format", "", "json", "json, or avro: the shape's fields as Avro, framed for a schema registry (contract and own-ttl shapes); the worker reads it with --value-format avro")
	fs.String(&o.registryURL, "schema-registry-url", "", "", "the schema registry the Avro schema is registered with, the worker's (default with --embedded: one in process)")
	fs.Int(&o.partitions, "partitions", "", 6, "partitions of the embedded topic")
	if err := fs.Parse(args); err != nil {
		if envflag.IsHelp(err) {
			return nil
		}
		return err
	}
	if o.dlqTopic == "" {
		o.dlqTopic = o.topic + ".dlq"
	}
	if o.count == 0 && o.duration <= 0 {
		return errors.New("give --count or --duration")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if o.embedded && o.valueFormat == "avro" && o.registryURL == "" {
		url, stop, err := startRegistry()
		if err != nil {
			return err
		}
		defer stop()
		o.registryURL = url
	}
	shape, flags, err := valueFormat(ctx, o.valueFormat, o.registryURL, o.shape)
	if err != nil {
		return err
	}
	o.shape = shape
	o.shape.WorkerFlags = append(o.shape.WorkerFlags, flags...)
	if o.embedded {
		emb, err := startEmbedded(ctx, &o, log)
		if err != nil {
			return err
		}
		defer emb.stop()
	}
	if o.brokers == "" {
		return errors.New("no brokers: --brokers, CELLTTL_BROKERS, or --embedded")
	}
	return loadTest(ctx, &o, strings.Split(o.brokers, ","), stdout)
}

// runBench is the bench subcommand: its flags, then the measurements.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	fs := envflag.NewUnprefixed("loadtest bench", "loadtest bench: the ceilings and the worker measured in one run (BENCHMARKS.md).", os.Stderr)
	var o bench.Options
	var brokers string
	fs.String(&brokers, "brokers", "CELLTTL_BROKERS", "", "Kafka brokers (scripts/services.sh starts one)")
	fs.Renamed("brokers", "KAFKA_BROKERS")
	fs.Int(&o.Events, "events", "", 300000, "events per measurement")
	fs.BytesInt(&o.PayloadBytes, "payload-bytes", "", 200, "bytes of filler per event")
	fs.Int(&o.Partitions, "partitions", "", 6, "partitions of the topics")
	fs.Int(&o.Writers, "writers", "", 4, "concurrent ApplyBulk calls of the raw Bigtable measurement (the worker's default)")
	var configs multiFlag
	fs.Value(&configs, "worker", "", `worker flags of one worker measurement, e.g. "--writers 8"; repeat for more (default: one run with the defaults)`)
	fs.String(&o.TenantsFile, "tenants", "", "tenants.yaml", "tenants file")
	fs.Int(&o.TenantCount, "tenant-count", "", 0, "instead of --tenants, a generated tenants file of this many tenants (TTLs from 1h to 7d)")
	fs.String(&o.Baseline, "baseline-bin", "", "", "another build of the worker to time in the same run, interleaved with this one (e.g. one built from an earlier commit)")
	fs.Int(&o.Rounds, "rounds", "", 1, "times each worker measurement is repeated (interleaved with the baseline's)")
	fs.String(&o.ProfileDir, "profile", "", "", "write the first worker measurement's CPU profile (worker-cpu.pprof) and allocations (worker-allocs.pprof) to this directory")
	fs.Int(&o.ProfileSeconds, "profile-seconds", "", 5, "length of the CPU profile: about the worker's run")
	fs.Duration(&o.Latency, "latency", "", 0, "then measure latency for this long at half the worker's rate: raw ApplyBulk, and the worker's produce → ack (0: skip)")
	fs.Int(&o.LatencyRate, "latency-rate", "", 0, "events/s of the latency measurement (default: half the maximum: of what raw ApplyBulk sustains for --latency, or of the worker's best rate if lower)")
	o.Shape = synth.Contract()
	fs.Value(synth.ShapeFlag(&o.Shape), "shape", "", "event layout, as for a load run; its worker flags are not added (give them with --worker, e.g. --shape own-ttl --worker \"\" --worker \"--ttl-from header:x-ttl\" times the same events without and with)")
	var valueFormatName, registryURL string
	fs.String(&valueFormatName, "value-format", "", "json", "json, or avro: the shape's fields as Avro, framed for the schema registry (contract and own-ttl shapes); every worker measurement is given --value-format avro and the registry")
	fs.String(&registryURL, "schema-registry-url", "", "", "the schema registry the Avro schema is registered with (scripts/services.sh prints one)")
	if err := fs.Parse(args); err != nil {
		if envflag.IsHelp(err) {
			return nil
		}
		return err
	}
	if brokers == "" || os.Getenv("BIGTABLE_EMULATOR_HOST") == "" {
		return errors.New("bench needs CELLTTL_BROKERS and BIGTABLE_EMULATOR_HOST: eval \"$(scripts/services.sh start)\" first, or run make bench")
	}
	if len(configs) == 0 {
		configs = multiFlag{""}
	}
	shape, flags, err := valueFormat(ctx, valueFormatName, registryURL, o.Shape)
	if err != nil {
		return err
	}
	o.Shape = shape
	for i := range configs {
		// Every worker reads the format the events are written in.
		configs[i] = strings.TrimSpace(strings.Join(flags, " ") + " " + configs[i])
	}
	o.Brokers, o.Workers = strings.Split(brokers, ","), configs
	return bench.Run(ctx, o, stdout)
}

// runLedger is the ledger subcommand: a worker on an erasure ledger of
// many erased users, against one on an empty ledger, this build and a
// baseline's.
func runLedger(ctx context.Context, args []string, stdout io.Writer) error {
	fs := envflag.NewUnprefixed("loadtest ledger", "loadtest ledger: fill an erasure ledger as three years of erasures leave it, and measure a worker on it against one on an empty ledger: time to ready, resident set, CPU while idle (BENCHMARKS.md). "+
		"The emulator holds the ledger in memory (about 1.5 KiB per erased user, two rows each): run it against an emulator of its own.", os.Stderr)
	var o bench.LedgerOptions
	var brokers string
	fs.String(&brokers, "brokers", "CELLTTL_BROKERS", "", "Kafka brokers (scripts/services.sh starts one)")
	fs.Renamed("brokers", "KAFKA_BROKERS")
	fs.Int(&o.Erasures, "erasures", "", 1_000_000, "erased users in the ledger")
	fs.Int(&o.InForce, "in-force", "", 200_000, "of them, how many expire after now (recorded within the last --record-life)")
	fs.Int(&o.Forever, "forever", "", 50_000, "of them, how many never expire (a topic that keeps records forever, or whose settings could not be read)")
	fs.Int(&o.Tenants, "ledger-tenants", "", 1000, "tenants the erased users belong to")
	fs.Duration(&o.RecordLife, "record-life", "", 14*24*time.Hour, "how long a record lives: the input topic's keep and the tenants' TTLs")
	fs.String(&o.TenantsFile, "tenants", "", "tenants.yaml", "the workers' tenants file")
	fs.String(&o.Baseline, "baseline-bin", "", "", "another build of the worker to measure on the same ledger (e.g. one built from before the expiry index)")
	fs.Duration(&o.Idle, "idle", "", 2*time.Minute, "how long each worker is watched once ready (a build before the index read every record each minute)")
	fs.Duration(&o.ReadyTimeout, "ready-timeout", "", 3*time.Minute, "how long a worker may take to be ready; one that is not is reported so, and watched for --idle anyway")
	if err := fs.Parse(args); err != nil {
		if envflag.IsHelp(err) {
			return nil
		}
		return err
	}
	if brokers == "" || os.Getenv("BIGTABLE_EMULATOR_HOST") == "" {
		return errors.New("ledger needs CELLTTL_BROKERS and BIGTABLE_EMULATOR_HOST")
	}
	o.Brokers = strings.Split(brokers, ",")
	return bench.RunLedger(ctx, o, stdout)
}

// runRollout is the rollout subcommand: its flags, then the measurement.
func runRollout(ctx context.Context, args []string, stdout io.Writer) error {
	fs := envflag.NewUnprefixed("loadtest rollout", "loadtest rollout: a rolling restart of a group of workers under steady load, measured from the group's committed offsets (RELIABILITY.md).", os.Stderr)
	var o rollout.Options
	var brokers string
	fs.String(&brokers, "brokers", "CELLTTL_BROKERS", "", "Kafka brokers (scripts/services.sh starts one)")
	fs.Renamed("brokers", "KAFKA_BROKERS")
	fs.String(&o.WorkerBin, "worker-bin", "", "", "the worker build to roll (required; scripts/rollout.sh builds one from a commit)")
	fs.Int(&o.Partitions, "partitions", "", 24, "partitions of the input topic")
	fs.Int(&o.Workers, "workers", "", 6, "worker processes in the group (replicas)")
	fs.Int(&o.Rate, "rate", "", 2000, "events per second, produced steadily throughout")
	fs.BytesInt(&o.PayloadBytes, "payload-bytes", "", 100, "bytes of filler per event")
	fs.String(&o.TenantsFile, "tenants", "", "tenants.yaml", "tenants file of the workers and of the events")
	fs.Duration(&o.Warmup, "warmup", "", 30*time.Second, "load before the rollout starts")
	fs.Duration(&o.Cooldown, "cooldown", "", 20*time.Second, "load after the last old worker exited, inside the measured window")
	fs.Int(&o.Surge, "surge", "", 1, "new workers started at a time (maxSurge; maxUnavailable is 0)")
	fs.Duration(&o.MinReady, "min-ready", "", 10*time.Second, "how long a new worker stays ready before an old one is stopped (minReadySeconds)")
	fs.Duration(&o.Probe, "probe-interval", "", time.Second, "how often a new worker's /readyz is asked")
	fs.Duration(&o.Grace, "grace", "", 45*time.Second, "SIGKILL this long after SIGTERM (terminationGracePeriodSeconds)")
	fs.Duration(&o.Poll, "poll", "", 100*time.Millisecond, "how often the group's committed offsets and the topic's end offsets are read")
	fs.Duration(&o.SessionTimeout, "session-timeout", "", 30*time.Second, "the workers' --session-timeout (the worker's default); the heartbeat is a tenth of it")
	fs.Duration(&o.CommitInterval, "commit-interval", "", time.Second, "the workers' --commit-interval (the worker's default)")
	fs.String(&o.WorkerFlags, "worker-flags", "", "", "more flags for every worker, space-separated")
	fs.String(&o.Dir, "dir", "", "", "where the workers' logs go (default: a new temporary directory)")
	fs.Bool(&o.Keep, "keep", "", false, "keep the topic, group and table afterwards")
	if err := fs.Parse(args); err != nil {
		if envflag.IsHelp(err) {
			return nil
		}
		return err
	}
	if brokers == "" || os.Getenv("BIGTABLE_EMULATOR_HOST") == "" {
		return errors.New("rollout needs CELLTTL_BROKERS and BIGTABLE_EMULATOR_HOST: eval \"$(scripts/services.sh start)\" first")
	}
	if o.WorkerBin == "" {
		return errors.New("rollout needs --worker-bin: a worker binary (scripts/rollout.sh builds one from a commit)")
	}
	o.Brokers = strings.Split(brokers, ",")
	o.Command = "go run ./loadtest rollout " + shellJoin(args)
	return rollout.Run(ctx, o, stdout)
}

// shellJoin quotes args as a shell would take them back.
func shellJoin(args []string) string {
	const plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@%+"
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if a == "" || strings.Trim(a, plain) != "" {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, "; ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
