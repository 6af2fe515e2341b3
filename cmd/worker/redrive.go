package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/redrive"
	"github.com/cellttl/cellttl/schema/registry"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
)

// redriveCmd is worker redrive: dead letters through the worker's path
// again, under the tenants file and mapping in force now (a tenant added
// since, a field mapping fixed). Its flags: its own, and the worker's that
// decide and write an event, so that the letters are decided as the
// worker would decide them.
type redriveCmd struct {
	tableOptions
	// The worker's flags that find the letters and decide them again: the
	// input topic's connection, the dead-letter topics, the key file the
	// letters are verified with, and the decision (mapping and clock).
	conn          kafkaconn.Connection
	dlq           deadletter.Names
	keyFile       string
	decide        pipeline.Config
	bound         erasureBound
	registry      registry.Config
	ttlFromChange bool
	redrive       redrive.Options
	topic         string
	reasons       string
	format        string
	wait          waitfor.Config
}

// exitUntrusted is redrive's exit status when letters were not trusted:
// passed over (a checkpoint moves past them), and the operator must know.
const exitUntrusted = 4

func newRedriveCmd() *redriveCmd {
	return &redriveCmd{tableOptions: defaultTableOptions(), conn: ingest.DefaultConfig().Connection, decide: pipeline.DefaultConfig(), bound: defaultErasureBound(),
		registry: registry.DefaultConfig(), redrive: redrive.Options{Partition: -1}}
}

func (rd *redriveCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker redrive", "worker redrive: send dead letters through the worker's decode, expiry and write again, each keyed to its original record, so that it gets exactly the cells it would have got (run twice, the same cells); a dry run unless --apply. The letters of users erased with worker forget are not written (the erasure ledger, read again every --erasure-refresh).\n"+
		"It takes the worker's settings that decide and write an event, from the same flags and environment. Exit status: 0 done, 1 an error, 2 bad flags, 4 letters were not trusted (see the log), 5 Bigtable, Kafka or the schema registry did not answer within --service-timeout (run it again).", out)
	ro := &rd.redrive
	f.Section("Redrive")
	f.String(&rd.topic, "from-topic", "", "", "the dead-letter topic to read (default: --dlq-topic and its --dlq-classes topics)")
	f.Int(&ro.Partition, "partition", "", ro.Partition, "read this partition only (default: all)")
	f.Int64(&ro.From, "from-offset", "", 0, "read from this offset")
	f.Int64(&ro.To, "to-offset", "", 0, "read up to this offset, excluded (default: the end when the run starts)")
	f.String(&rd.reasons, "reason", "", "", "comma-separated reason classes to redrive (not_json, invalid_id, unlisted_tenant, bigtable_refused…; default: all)")
	f.Bool(&ro.Apply, "apply", "", false, "write; without it, say what would be written")
	f.String(&ro.Checkpoint, "checkpoint", "", "", "a file recording how far an --apply run has come; run again with the same file to go on")
	f.Bool(&ro.TrustUnsigned, "trust-unsigned-letters", envflag.NoEnv, false, "with --apply and no --dlq-signing-key-file: write letters no key verifies, trusting that only the workers can produce to the dead-letter topics (a flag only: no environment variable)")
	f.String(&rd.format, "format", "", "text", "output: text or json")
	rd.tableOptions.register(f)
	rd.conn.RegisterFlags(f)
	rd.dlq.RegisterFlags(f)
	deadletter.RegisterKeyFlag(f, &rd.keyFile)
	rd.decide.RegisterMappingFlags(f)
	tablemeta.RegisterChangeFlag(f, &rd.ttlFromChange)
	pipeline.RegisterClockFlag(f, &rd.decide.Decoder.MaxClockSkew)
	f.Section("Redrive")
	registerStrictRetention(f, &ro.StrictRetention, "decide each letter by the worker's --strict-retention rule: an event whose time lies further past its letter's time (when the worker saw it) than --max-clock-skew is not written (outcome time_ahead)")
	rd.registry.RegisterFlags(f)
	rd.bound.register(f)
	rd.wait.RegisterFlags(f, jobWait)
	return f
}

// run checks the table, follows the erasure ledger, and redrives the
// letters through a writer of the worker's kind; the report goes to stdout.
func (rd *redriveCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	if err := checkFormat(rd.format); err != nil {
		return err
	}
	ro, d := rd.redrive, &rd.decide
	if err := errors.Join(rd.conn.Validate(), rd.dlq.Validate(rd.conn.Topic), d.Resolve(), rd.registry.Validate()); err != nil {
		return usageError(err)
	}
	ro.Brokers, ro.Security, ro.InputTopic, ro.Base = rd.conn.Brokers, rd.conn.Security, rd.conn.Topic, rd.dlq.Base(rd.conn.Topic)
	ro.Reasons, ro.MaxEventBytes = splitList(rd.reasons), d.Decoder.MaxBytes
	if rd.topic != "" {
		ro.Topics = []string{rd.topic}
	}
	keys, err := deadletter.KeysIn(rd.keyFile)
	if err != nil {
		return usageError(err)
	}
	if ro.Keys = keys; ro.Validate() != nil {
		return usageError(ro.Validate())
	}
	s, log, done, err := rd.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	if err := rd.checkTable(ctx, s, ro.Apply, log); err != nil {
		return err
	}
	erasures, stop, err := followErasures(ctx, s, rd.table, rd.bound.refresh, log)
	if err != nil {
		return err
	}
	defer stop()
	_ = followIncarnation(ctx, rd.conn, erasures, log)
	wcfg := rd.bound.writer
	wcfg.Held, wcfg.Gate = erasures.Held, erasureGate{erasures}
	// A redrive shares the cluster with the workers: the tenants file's
	// max_write_rate caps it as one more worker, and Bigtable's throttling
	// slows it.
	wcfg.Throttle = sink.NewThrottle()
	wcfg.Throttle.SetCap(s.cfg.WriteRate)
	ro.Erasures = erasures.Current
	w, err := sink.NewWriter(s.dc, rd.table.Target(), wcfg, nil, log)
	if err != nil {
		return err
	}
	schemas, err := openSchemas(ctx, rd.registry, d, nil, log)
	if err != nil {
		return err
	}
	if schemas != nil {
		defer schemas.Close()
	}
	ro.Schemas = d.Schemas // awaited with ctx: a wait of the run
	// Four attempts' worth, retries included: beyond that Bigtable refuses
	// the writes as a whole, which waiting will not mend within a job.
	// A batch paced at the cap waits for it on top: twice a batch's rows,
	// for a retry or the halves of a request being split.
	ro.WriteBound = 4 * wcfg.AttemptTimeout
	if s.cfg.WriteRate > 0 {
		ro.WriteBound += time.Duration(2 * float64(redrive.BatchRows) / s.cfg.WriteRate * float64(time.Second))
	}
	rep, err := redrive.Run(ctx, ro, &d.Decoder, s.cfg, w, log)
	if rep == nil {
		return err
	}
	log.Info("redrive", "operator", operator(), "topics", ro.Topics, "applied", ro.Apply, "letters", rep.Letters, "outcomes", rep.Outcomes)
	if perr := printRedrive(stdout, rd.format, rep); perr != nil && err == nil {
		err = perr
	}
	if n := rep.Outcomes[redrive.Untrusted]; n > 0 && err == nil {
		err = &exitError{code: exitUntrusted, quiet: rd.format == "json",
			err: fmt.Errorf("%d letters were not trusted and were passed over (the log says why each)", n)}
	}
	return err
}

// checkTable checks that the letters can be written as the workers write
// them: the cells are computed for the tenants file's GC rule (under
// another one they would be collected at once, or outlive their TTL), and
// under the --ttl-from the table's rows are written with (a dry run
// checks, records nothing).
func (rd *redriveCmd) checkTable(ctx context.Context, s *session, apply bool, log *slog.Logger) error {
	if err := sink.CheckGC(ctx, s.ac, rd.table.Target(), s.cfg.Policy.GCMaxAge()); err != nil {
		return fmt.Errorf("refusing to redrive: %w (the tenants file asks for %s)", err, describePolicy(s.cfg.Policy))
	}
	if err := tablemeta.CheckFamily(ctx, s.ac, rd.table.Table); err != nil {
		return fmt.Errorf("refusing to redrive: %w", err)
	}
	claim := tablemeta.Claim{TTLFrom: rd.decide.Fields.TTL, Change: rd.ttlFromChange, By: "worker redrive", Now: time.Now(), DryRun: !apply}
	return tablemeta.NewStore(s.dc, rd.table.Table).ClaimAndSay(ctx, claim, log)
}
func printRedrive(stdout io.Writer, format string, rep *redrive.Report) error {
	if format == "json" {
		return json.NewEncoder(stdout).Encode(rep)
	}
	verb := "would be"
	if rep.Applied {
		verb = "were"
	}
	fmt.Fprintf(stdout, "%d dead letters read; by reason and what %s done with them:\n", rep.Letters, verb)
	tw := tabwriter.NewWriter(stdout, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REASON\tOUTCOME\tLETTERS")
	for _, r := range slices.Sorted(maps.Keys(rep.ByReason)) {
		for _, oc := range slices.Sorted(maps.Keys(rep.ByReason[r])) {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", r, oc, rep.ByReason[r][oc])
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !rep.Applied && rep.Outcomes[redrive.Written] > 0 {
		fmt.Fprintf(stdout, "dry run: %d rows would be written; run again with --apply\n", rep.Outcomes[redrive.Written])
	}
	return nil
}
