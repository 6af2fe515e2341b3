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

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/redrive"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
)

// redriveOptions are the flags of worker redrive: its own, and the
// worker's that decide and write an event as the worker does.
type redriveOptions struct {
	runOptions
	redrive                redrive.Options
	topic, reasons, format string
	// trustUnsigned writes letters no key verifies: the operator vouches
	// that only the workers can write to the dead-letter topics.
	trustUnsigned bool
}

// exitUntrusted is redrive's exit status when letters were not trusted:
// passed over (a checkpoint moves past them), and the operator must know.
const exitUntrusted = 4

func (rd *redriveOptions) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker redrive", "worker redrive: send dead letters through the worker's decode, expiry and write again, each keyed to its original record, so that it gets exactly the cells it would have got (run twice, the same cells); a dry run unless --apply. The letters of users erased with worker forget are not written (the erasure ledger, read again every --erasure-refresh).\n"+
		"It takes the worker's settings that decide and write an event, from the same flags and environment. Exit status: 0 done, 1 an error, 2 bad flags, 4 letters were not trusted (see the log).", out)
	o, ro := &rd.runOptions, &rd.redrive
	f.Section("Redrive")
	f.String(&rd.topic, "from-topic", "", "", "the dead-letter topic to read (default: --dlq-topic and its --dlq-classes topics)")
	f.Int(&ro.Partition, "partition", "", ro.Partition, "read this partition only (default: all)")
	f.Int64(&ro.From, "from-offset", "", 0, "read from this offset")
	f.Int64(&ro.To, "to-offset", "", 0, "read up to this offset, excluded (default: the end when the run starts)")
	f.String(&rd.reasons, "reason", "", "", "comma-separated reason classes to redrive (not_json, invalid_id, unlisted_tenant, bigtable_refused…; default: all)")
	f.Bool(&ro.Apply, "apply", "", false, "write; without it, say what would be written")
	f.String(&ro.Checkpoint, "checkpoint", "", "", "a file recording how far an --apply run has come; run again with the same file to go on")
	f.Bool(&rd.trustUnsigned, "trust-unsigned-letters", envflag.NoEnv, false, "with --apply and no --dlq-signing-key-file: write letters no key verifies, trusting that only the workers can produce to the dead-letter topics (a flag only: no environment variable)")
	f.String(&rd.format, "format", "", "text", "output: text or json")
	o.tableOptions.register(f)
	o.kafka.RegisterConnectionFlags(f)
	o.dlq.RegisterTopicFlags(f)
	o.dlq.RegisterKeyFlags(f)
	o.pipe.RegisterMappingFlags(f)
	tablemeta.RegisterChangeFlag(f, &o.ttlFromChange)
	o.pipe.RegisterClockFlags(f)
	f.Section("Redrive")
	registerStrictRetention(f, &ro.StrictRetention, "decide each letter by the worker's --strict-retention rule: an event whose time lies further past its letter's time (when the worker saw it) than --max-clock-skew is not written (outcome time_ahead)")
	o.registry.RegisterFlags(f)
	o.registerErasureBound(f)
	return f
}

// runRedrive is worker redrive: dead letters through the worker's path
// again, under the tenants file and mapping in force now (a tenant added
// since, a field mapping fixed). It takes the worker's flags, so that the
// letters are decided as the worker would decide them.
func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	rd := redriveOptions{runOptions: defaultRunOptions(), redrive: redrive.Options{Partition: -1}}
	if err := parse(rd.flags(stderr), args); err != nil {
		return err
	}
	o, ro, topic, reasons, format := &rd.runOptions, rd.redrive, rd.topic, rd.reasons, rd.format
	if err := checkFormat(format); err != nil {
		return err
	}
	if err := errors.Join(o.kafka.Validate(), o.dlq.Validate(o.kafka.Topic), o.pipe.Resolve(), o.registry.Validate()); err != nil {
		return usageError(err)
	}
	ro.Brokers, ro.Security, ro.Reasons, ro.MaxEventBytes = o.kafka.Brokers, o.kafka.Security, splitList(reasons), o.pipe.Decoder.MaxBytes
	ro.InputTopic = o.kafka.Topic
	keys, err := o.dlq.Keys()
	if err != nil {
		return usageError(err)
	}
	ro.Keys = keys
	if keys == nil && ro.Apply && !rd.trustUnsigned {
		// Unsigned, a letter is whatever anyone who may produce to a
		// dead-letter topic wrote: its source, its time, its reason.
		return usageError(errors.New("--apply without --dlq-signing-key-file: letters cannot be verified. Give the workers' signing keys, " +
			"or pass --trust-unsigned-letters if only the workers can produce to the dead-letter topics"))
	}
	s, log, done, err := o.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	if ro.Topics = []string{topic}; topic == "" {
		// Every dead-letter topic the broker has: the classes the flags
		// name and those earlier flags named.
		if ro.Topics, err = deadletter.TopicsOn(ctx, o.kafka.Brokers, o.kafka.Security, o.dlq.Base(o.kafka.Topic)); err != nil {
			return err
		}
		if len(ro.Topics) == 0 {
			return fmt.Errorf("no dead-letter topic %s (nor %s.<class>) on the brokers", o.dlq.Base(o.kafka.Topic), o.dlq.Base(o.kafka.Topic))
		}
	}
	// A checkpoint belongs to one selection of letters under one tenants
	// file: another run with other filters must not skip what it never read.
	// The key decides which letters are trusted: a run with another key
	// must not skip the letters this one refused.
	keyID := "none"
	if keys != nil {
		keyID = keys.ID()
	} else {
		log.Warn("letters are not verified: without --dlq-signing-key-file, a letter anyone produced to a dead-letter topic is trusted as the worker's")
	}
	ro.Filters = fmt.Sprintf("topics=%v partition=%d from=%d to=%d reasons=%v tenants=%s key=%s", ro.Topics, ro.Partition, ro.From, ro.To, ro.Reasons, s.cfg.Version, keyID)
	if err := checkRedriveTable(ctx, s, o, ro.Apply, log); err != nil {
		return err
	}
	erasures, stop, err := watchErasures(ctx, s, o.table, o.erasureRefresh, log)
	if err != nil {
		return err
	}
	defer stop()
	wcfg := o.writer
	wcfg.Held, wcfg.Gate = erasures.Held, erasures
	ro.Erasures = erasures.Current
	w, err := sink.NewWriter(s.dc, o.table.Target(), wcfg, nil, log)
	if err != nil {
		return err
	}
	schemas, err := o.openSchemas(nil, log)
	if err != nil {
		return err
	}
	if schemas != nil {
		defer schemas.Close()
	}
	// Four attempts' worth, retries included: beyond that Bigtable refuses
	// the writes as a whole, which waiting will not mend within a job.
	ro.WriteBound = 4 * wcfg.AttemptTimeout
	rep, err := redrive.Run(ctx, ro, &o.pipe.Decoder, s.cfg, w, log)
	if rep != nil {
		log.Info("redrive", "operator", operator(), "topics", ro.Topics, "applied", ro.Apply, "letters", rep.Letters, "outcomes", rep.Outcomes)
		if perr := printRedrive(stdout, format, rep); perr != nil && err == nil {
			err = perr
		}
		if n := rep.Outcomes[redrive.Untrusted]; n > 0 && err == nil {
			err = &exitError{code: exitUntrusted, quiet: format == "json",
				err: fmt.Errorf("%d letters were not trusted and were passed over (the log says why each)", n)}
		}
	}
	return err
}

// checkRedriveTable checks that the letters can be written as the workers
// write them: the cells are computed for the tenants file's GC rule (under
// another one they would be collected at once, or outlive their TTL), and
// under the --ttl-from the table's rows are written with (a dry run
// checks, records nothing).
func checkRedriveTable(ctx context.Context, s *session, o *runOptions, apply bool, log *slog.Logger) error {
	if err := sink.CheckGC(ctx, s.ac, o.table.Target(), s.cfg.Policy.GCMaxAge()); err != nil {
		return fmt.Errorf("refusing to redrive: %w (the tenants file asks for %s)", err, describePolicy(s.cfg.Policy))
	}
	if err := tablemeta.CheckFamily(ctx, s.ac, o.table.Table); err != nil {
		return fmt.Errorf("refusing to redrive: %w", err)
	}
	return claimTTLFrom(ctx, s.dc, o.table.Table, o.pipe.Fields.TTL, o.ttlFromChange, !apply, "worker redrive", log)
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
