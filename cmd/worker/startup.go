package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/internal/retry"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
)

// startupError is a start-up check that failed, naming what was checked.
type startupError struct {
	what string // "Bigtable emulator at 127.0.0.1:9", "Kafka broker b:9092"
	err  error
	// permanent: waiting cannot fix it (a missing table, another GC rule).
	permanent bool
}

func (e *startupError) Error() string { return e.what + ": " + e.err.Error() }
func (e *startupError) Unwrap() error { return e.err }

// attemptTimeout bounds one start-up check: a dependency that does not
// answer in that time is tried again, until --startup-timeout.
const attemptTimeout = 10 * time.Second

// startupChecks runs check until it passes, fails for good, or timeout has
// passed, with a log line per failed attempt. The error names what failed
// and why.
func startupChecks(ctx context.Context, timeout time.Duration, log *slog.Logger, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	b := retry.New(ctx, retry.Policy{Initial: time.Second, Max: 5 * time.Second})
	for {
		actx, cancel := context.WithTimeout(ctx, min(attemptTimeout, max(time.Until(deadline), time.Second)))
		err := check(actx)
		cancel()
		var se *startupError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &se) && se.permanent:
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("%w (interrupted)", err)
		case time.Now().Add(b.Next()).After(deadline):
			return fmt.Errorf("%w (still failing after --startup-timeout %s)", err, timeout)
		}
		log.Warn("start-up check failed; trying again", "attempt", b.Attempt(), "backoff", b.Next(), "err", err)
		if !b.Wait() {
			return fmt.Errorf("%w (interrupted)", err)
		}
	}
}

// bigtableWhere names the Bigtable a check talks to.
func bigtableWhere(tc sink.TableConfig) (what, addr string) {
	if addr := os.Getenv("BIGTABLE_EMULATOR_HOST"); addr != "" {
		return "Bigtable emulator at " + addr, addr
	}
	return fmt.Sprintf("Bigtable instance %s/%s", tc.Project, tc.Instance), ""
}

// checkBigtable checks that the family exists with the GC rule maxAge, and
// the family of the workers' record beside it. Another rule is permanent;
// a table or a family that is not there yet is waited for, as anything
// else is: under GitOps the workers of a release may start beside its
// setup Job (Flux applies both at once), which makes them. An emulator
// that cannot be reached is said with the reason the connection failed,
// which the client's own retries would hide behind a deadline.
func checkBigtable(ctx context.Context, ac *bigtable.AdminClient, tc sink.TableConfig, maxAge time.Duration) error {
	what, addr := bigtableWhere(tc)
	if addr != "" {
		if err := dial(ctx, addr); err != nil {
			return &startupError{what: what, err: err}
		}
	}
	err := sink.CheckGC(ctx, ac, tc.Target(), maxAge)
	if err == nil {
		// The family where the worker records its --ttl-from and tenants
		// file version: on a table set up before it came, setup adds it.
		err = tablemeta.CheckFamily(ctx, ac, tc.Table)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sink.ErrNotSetUp), errors.Is(err, tablemeta.ErrNotSetUp):
		return &startupError{what: what, err: fmt.Errorf("%w (waiting for it)", err)}
	case sink.IsMismatch(err), tablemeta.Unfit(err):
		return &startupError{what: what, err: err, permanent: true}
	}
	return &startupError{what: what, err: err}
}

// checkKafka checks that a broker of the list takes a connection the way
// the consumer will make it with sec: TCP and, when sec has TLS, the
// handshake and a first request (kafkaconn.Security.CheckBroker). The error
// names each broker and why it did not.
//
// A broker that turns the TLS settings down (a certificate that does not
// verify, either way) is a permanent failure, said at once: a certificate
// does not fix itself while the worker waits, and the brokers of a cluster
// share their CA, so one refusal stands for all. Anything else, a refused
// connection or a timeout, is waited for.
func checkKafka(ctx context.Context, brokers []string, s kafkaconn.Security) error {
	var errs brokerErrors
	permanent := false
	for _, b := range brokers {
		err := s.CheckBroker(ctx, b)
		if err == nil {
			return nil
		}
		permanent = permanent || kafkaconn.BrokerRefused(err)
		errs = append(errs, brokerError{addr: b, err: err})
	}
	if len(brokers) == 1 {
		return &startupError{what: "Kafka broker " + brokers[0], err: errs[0].err, permanent: permanent}
	}
	return &startupError{what: "Kafka brokers", err: errs, permanent: permanent}
}

// brokerError is why one broker of several failed its check.
type brokerError struct {
	addr string
	err  error
}

func (e brokerError) Error() string { return e.addr + ": " + e.err.Error() }
func (e brokerError) Unwrap() error { return e.err }

// brokerErrors are every broker's failure, on one line.
type brokerErrors []brokerError

func (e brokerErrors) Error() string {
	s := make([]string, len(e))
	for i, b := range e {
		s[i] = b.Error()
	}
	return strings.Join(s, "; ")
}

func (e brokerErrors) Unwrap() []error {
	errs := make([]error, len(e))
	for i, b := range e {
		errs[i] = b
	}
	return errs
}

// dial opens and closes a TCP connection to addr; its error is the cause,
// without the address the caller names.
func dial(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			return op.Err
		}
		return err
	}
	return c.Close()
}

// claimRecord checks the worker's --ttl-from against the table's record
// and records the tenants file version it runs, before anything is
// consumed: a worker under another setting than the rows already written
// must write nothing.
func (w *worker) claimRecord(ctx context.Context, dc *bigtable.Client) error {
	o := w.o
	store := tablemeta.NewStore(dc, o.table.Table)
	if err := store.ClaimAndSay(ctx, tablemeta.Claim{TTLFrom: o.pipe.Fields.TTL, Change: o.ttlFromChange, By: "worker run", Now: time.Now()}, w.log); err != nil {
		return err
	}
	w.record = tablemeta.NewRecorder(store, w.log)
	if err := w.record.Record(ctx, w.cfg.Version); err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	return nil
}
