package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"

	"github.com/cellttl/cellttl/loadtest/drive"
	"github.com/cellttl/cellttl/loadtest/report"
	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/loadtest/verify"
	"github.com/cellttl/cellttl/tenants"
)

// loadTest produces, follows the worker until it caught up, verifies and
// writes the report.
func loadTest(ctx context.Context, o *options, brokers []string, stdout io.Writer) error {
	cfg, err := tenants.Load(o.tenantsFile)
	if err != nil {
		return err
	}
	m, err := synth.ParseMix(slices.Collect(maps.Keys(cfg.Policy.Tenants)), o.weights)
	if err != nil {
		return err
	}
	load := &drive.Options{
		Brokers: brokers, Topic: o.topic, Mix: m, Shape: o.shape, Rate: o.rate, Count: o.count, Duration: o.duration,
		Users: o.users, ZipfS: o.zipfS, PayloadBytes: o.payloadBytes, Malformed: o.malformed, Seed: o.seed,
		StatusURL: o.statusURL, Settle: o.settle,
	}
	res, err := drive.Run(ctx, load, stdout)
	if err != nil {
		return err
	}
	if o.reportDir == "" {
		o.reportDir = filepath.Join("loadtest-report", res.RunID)
	}
	var check *verify.Result
	if o.verify {
		fmt.Fprintln(stdout, "verifying through the reader and the dead-letter topic...")
		check, err = verify.Run(ctx, verify.Options{
			Brokers: brokers, DLQTopic: o.dlqTopic, Emulator: o.emulator, Project: o.project, Instance: o.instance,
			Table: o.table, Family: o.family,
		}, cfg, res.Gen, res.Recs)
		if err != nil {
			return err
		}
	}
	path, err := report.Write(report.Run{Dir: o.reportDir, Embedded: o.embedded, Load: load, Result: res, Check: check})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report: %s\n", path)
	if o.verify {
		fmt.Fprintln(stdout, check.Summary())
		if !check.OK() {
			return verify.ErrMismatch
		}
	}
	return nil
}
