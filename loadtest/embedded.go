package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/testkit/lab"
)

// embedded is in-process Kafka and Bigtable with a worker process between.
type embedded struct {
	kafka  *inproc.Kafka
	bt     *inproc.Bigtable
	worker *lab.Process
	dir    string
}

// startEmbedded starts the services and a worker built from this checkout,
// and points o at them.
func startEmbedded(ctx context.Context, o *options, log *slog.Logger) (*embedded, error) {
	e := &embedded{}
	var err error
	if e.dir, err = os.MkdirTemp("", "cellttl-loadtest"); err != nil {
		return nil, err
	}
	if e.bt, err = inproc.StartBigtable(inproc.BigtableOptions{}); err != nil {
		return nil, err
	}
	// The worker creates the dead-letter topic with its retention: made
	// here with the defaults (7 days), letters would keep no payload.
	if e.kafka, err = inproc.StartKafka(inproc.KafkaOptions{Topics: []inproc.Topic{{Name: o.topic, Partitions: o.partitions}}}); err != nil {
		e.stop()
		return nil, err
	}
	o.brokers = strings.Join(e.kafka.Brokers(), ",")
	// The worker process finds the emulator through the variable the
	// client library defines; this process's verifying clients are given
	// the emulator itself.
	env := []string{"BIGTABLE_EMULATOR_HOST=" + e.bt.Addr()}
	o.project, o.instance, o.emulator = "local", "local", e.bt

	fmt.Fprintln(os.Stderr, "loadtest: building the worker")
	bin, err := lab.Build(ctx, e.dir)
	if err != nil {
		e.stop()
		return nil, err
	}
	common := []string{"--tenants", o.tenantsFile, "--table", o.table, "--family", o.family}
	if err := lab.Run(ctx, bin, env, append([]string{"setup"}, common...)...); err != nil {
		e.stop()
		return nil, err
	}
	args := append([]string{"run", "--brokers", o.brokers, "--topic", o.topic, "--dlq-topic", o.dlqTopic, "--log-level", "warn"}, common...)
	args = append(args, o.shape.WorkerFlags...)
	args = append(args, strings.Fields(o.workerFlags)...)
	if e.worker, err = lab.Start(lab.Options{Bin: bin, Args: args, Env: env, Log: os.Stderr}); err != nil {
		e.stop()
		return nil, err
	}
	o.statusURL = e.worker.Admin + "/status"
	fmt.Fprintf(os.Stderr, "loadtest: embedded Kafka %s, emulator %s, worker pid %d (status %s)\n", o.brokers, e.bt.Addr(), e.worker.Pid(), o.statusURL)
	return e, nil
}

func (e *embedded) stop() {
	if e.worker != nil {
		_ = e.worker.Stop(40 * time.Second)
	}
	if e.kafka != nil {
		e.kafka.Close()
	}
	if e.bt != nil {
		e.bt.Close()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}
