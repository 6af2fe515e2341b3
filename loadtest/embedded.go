package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/loadtest/bench"
)

// embedded is in-process Kafka and Bigtable with a worker process between.
type embedded struct {
	kafka  *inproc.Kafka
	bt     *inproc.Bigtable
	worker *exec.Cmd
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
	env := append(os.Environ(), "BIGTABLE_EMULATOR_HOST="+e.bt.Addr())
	o.project, o.instance, o.emulator = "local", "local", e.bt

	bin := filepath.Join(e.dir, "worker")
	fmt.Fprintln(os.Stderr, "loadtest: building the worker")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/worker").CombinedOutput(); err != nil {
		e.stop()
		return nil, fmt.Errorf("build the worker (run from the repository root): %v\n%s", err, out)
	}
	common := []string{"--tenants", o.tenantsFile, "--table", o.table, "--family", o.family}
	setup := exec.CommandContext(ctx, bin, append([]string{"setup"}, common...)...)
	setup.Env = env
	if out, err := setup.CombinedOutput(); err != nil {
		e.stop()
		return nil, fmt.Errorf("worker setup: %v\n%s", err, out)
	}
	port, err := bench.FreePort()
	if err != nil {
		e.stop()
		return nil, err
	}
	args := append([]string{"run", "--brokers", o.brokers, "--topic", o.topic, "--dlq-topic", o.dlqTopic,
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", port), "--log-level", "warn"}, common...)
	args = append(args, o.shape.WorkerFlags...)
	args = append(args, strings.Fields(o.workerFlags)...)
	e.worker = exec.Command(bin, args...)
	e.worker.Env = env
	e.worker.Stdout, e.worker.Stderr = os.Stderr, os.Stderr
	if err := e.worker.Start(); err != nil {
		e.stop()
		return nil, fmt.Errorf("start the worker: %w", err)
	}
	o.statusURL = fmt.Sprintf("http://127.0.0.1:%d/status", port)
	fmt.Fprintf(os.Stderr, "loadtest: embedded Kafka %s, emulator %s, worker pid %d (status %s)\n", o.brokers, e.bt.Addr(), e.worker.Process.Pid, o.statusURL)
	return e, nil
}

func (e *embedded) stop() {
	if e.worker != nil && e.worker.Process != nil {
		_ = e.worker.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = e.worker.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = e.worker.Process.Kill()
		}
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
