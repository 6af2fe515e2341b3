package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cellttl/cellttl/admin"
	"github.com/cellttl/cellttl/internal/duration"
)

// closeKafka closes the Kafka parts openKafka opened: the consumer (its
// final commit, then it leaves the group), the watch, the dead-letter
// writer.
func (w *worker) closeKafka() error {
	var errs []error
	if w.consumer != nil {
		errs = append(errs, w.consumer.Close())
	}
	if w.times != nil {
		w.times.Close()
	}
	if w.dlq != nil {
		errs = append(errs, w.dlq.Close())
	}
	return errors.Join(errs...)
}

// serve runs the pipeline until ctx ends and it has drained, with the
// admin server beside it when --admin-addr is set, and closes the parts.
//
// The parts close only once nothing uses them: the admin server's probes
// first, then the background loops, then the clients. A check that ran
// after its client's transport closed opened a connection pool of its own
// that nothing closed again.
func (w *worker) serve(ctx context.Context, metrics http.Handler) error {
	o, log := w.o, w.log
	var wg sync.WaitGroup
	// The background loops outlive SIGTERM until the pipeline has drained:
	// a drain writes what it holds, and needs the ledger's refresh, the
	// dead-letter checks and the rules as much as the run did. A refresh
	// stopped with the signal left a drain begun with a stale ledger unable
	// to write anything until its deadline.
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	shutdownAdmin := func() {}
	closeParts := func() error {
		shutdownAdmin()
		stopBackground()
		wg.Wait()
		if w.schemas != nil {
			w.schemas.Close()
		}
		return w.closeKafka() // the final commit, then leave the group
	}
	wg.Go(func() { w.dlq.Run(bg, o.dlq.CheckInterval) })
	wg.Go(func() { w.times.Run(bg, o.dlq.CheckInterval) })
	wg.Go(func() { w.rules.Run(bg, o.writer.RuleCheckInterval) })
	wg.Go(func() { w.erasures.Run(bg) })
	wg.Go(func() { w.followTopicID(bg) })
	// The version in force, recorded at each reload and every heartbeat:
	// worker forget checks its tenants file against it.
	wg.Go(func() {
		w.record.Run(bg, 5*time.Second, func() string { return w.reloader.Current().Version }, w.reloader.Applied())
	})
	if o.tenants.Path != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { w.reloader.Run(bg, hup) })
	}
	if o.admin.Addr != "" {
		st := &statusSource{w: w, started: time.Now()}
		srv := admin.New(o.admin, metrics, st.status, w.readinessChecks(), log)
		addr, err := srv.Start()
		shutdownAdmin = func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}
		if err = errors.Join(err, srv.RegisterMetrics(w.meter)); err != nil {
			return errors.Join(err, closeParts())
		}
		log.Info("admin server listening", "addr", addr.String())
	}
	if host := os.Getenv("BIGTABLE_EMULATOR_HOST"); host != "" {
		// The client library sends every request there, unauthenticated:
		// right for tests, never for production.
		log.Warn("BIGTABLE_EMULATOR_HOST is set: every Bigtable request goes to that address, without credentials (an emulator), not to Google Cloud", "emulator", host)
	}
	log.Info("worker started", "topic", o.kafka.Topic, "group", o.kafka.Group, "dlq_topic", o.dlq.Base(o.kafka.Topic),
		"table", o.table.Table, "family", o.table.Family, "strategy", w.cfg.Policy.Strategy.String(),
		"default_ttl", duration.Format(w.cfg.Policy.DefaultTTL), "tenants", len(w.cfg.Policy.Tenants), "config_version", w.cfg.Version)
	runErr := w.pipeline.Run(ctx)
	closeErr := closeParts()
	t := w.pipeline.Stats().Totals()
	log.Info("worker stopping", "consumed", t.Consumed, "written", t.Written, "expired", t.Expired, "dead_lettered", t.DeadLettered, "clamped", t.Clamped, "erased", t.Erased, "committed", w.consumer.Committed())
	return errors.Join(runErr, closeErr)
}
