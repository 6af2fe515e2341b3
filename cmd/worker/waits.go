package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/schema/registry"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/telemetry"
)

// exitNoAnswer is the exit status of a command that waited for an answer
// from Bigtable, Kafka or the schema registry for longer than
// --service-timeout (or than a bound of its own, such as a Kafka
// request's): a service away or stalled, which running the command again
// later may mend, where 1 is an error that waiting will not.
const exitNoAnswer = 5

// The defaults of --service-timeout: the longest each command waits for
// one answer. worker run has none: its start-up is --startup-timeout's,
// and then it waits for Bigtable and Kafka for as long as they are away,
// unready meanwhile.
const (
	// setupWait: worker setup runs as a Kubernetes Job that Argo CD or
	// Flux waits for. With the Job's backoffLimit of 3, four tries of 30s
	// and the pod's backoff between them (10s, 20s, 40s) end within about
	// 3 minutes, inside the 5 minutes Helm and Flux wait by default;
	// Bigtable answers an admin call in seconds.
	setupWait = 30 * time.Second
	// checkWait is the bound worker check always had on its table read:
	// it answers a person or a CI step.
	checkWait = 15 * time.Second
	// readWait: worker read and worker retention answer a person.
	readWait = 30 * time.Second
	// jobWait: audit, retime, migrate, forget, offboard and redrive run for minutes
	// to hours, and one stopped is run again: a blip of Bigtable or Kafka
	// shorter than a minute is waited out. Their scans are not bounded
	// by it: each row read is an answer.
	jobWait = time.Minute
)

// boundedCommand is a command whose waits for services --service-timeout
// bounds (internal/waitfor): every command but run, demo and version.
type boundedCommand interface {
	command
	waits() bounds
}

// bounds is what bounds a command's waits: --service-timeout, where each
// service is, for the errors, and the log that says a wait goes on.
type bounds struct {
	cfg    waitfor.Config
	places map[string]string
	log    telemetry.LogConfig
}

// runBounded runs c with its waits watched. An answer that never came is
// exit status exitNoAnswer, with what was waited for, where and how long.
func runBounded(ctx context.Context, c boundedCommand, stdout, stderr io.Writer) error {
	b := c.waits()
	if err := b.cfg.Validate(); err != nil {
		return usageError(err)
	}
	// The watch says a long wait from its own goroutine, beside the
	// command's own lines.
	stderr = &syncWriter{w: stderr}
	log, err := b.log.Logger(stderr)
	if err != nil {
		return usageError(err)
	}
	ctx, w := waitfor.Start(ctx, b.cfg.Timeout, waitfor.Flag, b.places, log)
	err = c.run(ctx, stdout, stderr)
	w.Stop()
	return noAnswer(w.Expired(), err)
}

// noAnswer gives err exit status exitNoAnswer when the watch ended the
// command (expired), or a bound of the command's own ran out; the error is
// then the wait's, and the resumption an interrupted job says. A command
// that has said everything (check's verdict) keeps its status.
func noAnswer(expired *waitfor.NoAnswer, err error) error {
	var ee *exitError
	isExit := errors.As(err, &ee)
	var na *waitfor.NoAnswer
	switch {
	case isExit && ee.quiet:
		return err
	case expired != nil && isExit && ee.code == exitInterrupted:
		return &exitError{code: exitNoAnswer, err: fmt.Errorf("%w; %v", expired, ee.err)}
	case expired != nil:
		return &exitError{code: exitNoAnswer, err: expired}
	case errors.As(err, &na):
		return &exitError{code: exitNoAnswer, err: err}
	}
	return err
}

// waitErr is err, or the wait that ended ctx's command when one did: what
// a command that reports an error rather than returning it (check) says.
func waitErr(ctx context.Context, err error) error {
	var na *waitfor.NoAnswer
	if errors.As(context.Cause(ctx), &na) {
		return na
	}
	return err
}

// placesOf names where each service of a command is.
func placesOf(t sink.TableConfig, brokers []string, reg *registry.Config) map[string]string {
	bt, _ := bigtableWhere(t)
	p := map[string]string{waitfor.Bigtable: bt}
	switch len(brokers) {
	case 0:
	case 1:
		p[waitfor.Kafka] = "Kafka broker " + brokers[0]
	default:
		p[waitfor.Kafka] = "Kafka brokers " + strings.Join(brokers, ",")
	}
	if reg != nil && reg.URL != "" {
		p[waitfor.Registry] = "the schema registry at " + reg.URL
	}
	return p
}

func (o *setupCmd) waits() bounds { return bounds{o.wait, placesOf(o.table, nil, nil), o.log} }
func (o *checkCmd) waits() bounds { return bounds{o.wait, placesOf(o.table, nil, nil), o.log} }
func (o *readCmd) waits() bounds  { return bounds{o.wait, placesOf(o.table, nil, &o.registry), o.log} }
func (o *auditCmd) waits() bounds { return bounds{o.wait, placesOf(o.table, nil, nil), o.log} }
func (o *retimeCmd) waits() bounds {
	return bounds{o.wait, placesOf(o.table, nil, nil), o.log}
}
func (o *migrateCmd) waits() bounds {
	return bounds{o.wait, placesOf(o.table, nil, nil), o.log}
}
func (fo *forgetCmd) waits() bounds {
	return bounds{fo.wait, placesOf(fo.table, fo.topics.conn.Brokers, nil), fo.log}
}
func (oc *offboardCmd) waits() bounds {
	return bounds{oc.wait, placesOf(oc.table, oc.topics.conn.Brokers, nil), oc.log}
}
func (ro *retentionCmd) waits() bounds {
	return bounds{ro.wait, placesOf(ro.table, ro.topics.conn.Brokers, nil), ro.log}
}
func (rd *redriveCmd) waits() bounds {
	return bounds{rd.wait, placesOf(rd.table, rd.conn.Brokers, &rd.registry), rd.log}
}

// syncWriter is a writer that two goroutines share.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
