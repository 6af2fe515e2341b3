package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/codes"

	"github.com/cellttl/cellttl/admin"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// serve runs the pipeline until ctx ends and it has drained, with the admin
// server beside it when --admin-addr is set.
func serve(ctx context.Context, o *runOptions, brokers []string, cfg *tenants.Config, dc *bigtable.Client, metrics http.Handler, log *slog.Logger) error {
	dialer, err := o.security.Dialer()
	if err != nil {
		return err
	}
	dlq, err := ingest.NewDeadLetterWriter(brokers, o.dlqTopic, o.security, log)
	if err != nil {
		return err
	}
	// Before joining the group: a dead-letter topic that cannot take dead
	// letters is said at once, not at the first bad event. The worker runs
	// anyway (good events flow); /readyz answers 503 until it is fixed.
	if info, err := dlq.Check(ctx); err != nil {
		log.Error("dead-letter topic cannot take dead letters; bad events will wait, uncommitted, until it can", "topic", o.dlqTopic, "err", err)
	} else {
		log.Info("dead-letter topic ready", "topic", info.Topic, "created", info.Created, "max_message_bytes", info.MaxMessageBytes, "writable", info.Writable)
	}
	fetchTransport, err := o.security.Transport()
	if err != nil {
		return err
	}
	consumer, err := ingest.NewConsumer(ingest.ConsumerConfig{
		Brokers:          brokers,
		Topic:            o.topic,
		Group:            o.group,
		CommitInterval:   o.commitInterval,
		SessionTimeout:   o.sessionTimeout,
		MaxInflightBytes: fetchBudget(o.maxInflightBytes, o.pipe),
		MaxEventBytes:    o.pipe.Decoder.MaxBytes,
		OffsetReset:      o.offsetReset,
		Dialer:           dialer,
		Transport:        fetchTransport,
	}, log)
	if err != nil {
		_ = dlq.Close()
		return err
	}
	var lastWriteErr lastError
	wcfg := sink.DefaultWriterConfig()
	wcfg.AttemptTimeout = o.writeTimeout
	wcfg.OnRetry = func(rows int, code codes.Code, err error) { lastWriteErr.set(err) }
	writer := sink.NewWriter(dc, o.target(), wcfg, log)

	reloader := tenants.NewReloader(o.tenantsFile, cfg, o.reloadInterval, log)
	if err := reloader.RegisterMetrics(otel.Meter(meterName)); err != nil {
		return err
	}
	p := pipeline.New(o.pipe, consumer, writer, dlq, reloader.Current, log)
	if o.onPipeline != nil {
		o.onPipeline(p)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	bg, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	wg.Go(func() { dlq.Run(bg, 30*time.Second) })
	if o.tenantsFile != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { reloader.Run(bg, hup) })
	}
	if o.adminAddr != "" {
		st := &statusSource{o: o, consumer: consumer, reloader: reloader, stats: p.Stats(), started: time.Now(), lastWriteErr: &lastWriteErr, dlq: dlq}
		srv := admin.New(o.adminAddr, metrics, st.status, readinessChecks(consumer, dc.Open(o.table), writer, dlq, reloader), log)
		addr, err := srv.Start()
		if err != nil {
			return err
		}
		log.Info("admin server listening", "addr", addr.String())
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	log.Info("worker started", "topic", o.topic, "group", o.group, "dlq_topic", o.dlqTopic,
		"table", o.table, "family", o.family, "strategy", cfg.Policy.Strategy.String(),
		"default_ttl", duration.Format(cfg.Policy.DefaultTTL), "tenants", len(cfg.Policy.Tenants), "config_version", cfg.Version)
	runErr := p.Run(ctx)
	t := p.Stats().Totals()
	log.Info("worker stopping", "consumed", t.Consumed, "written", t.Written, "expired", t.Expired, "dead_lettered", t.DeadLettered, "clamped", t.Clamped, "committed", consumer.Committed())
	return errors.Join(runErr, consumer.Close(), dlq.Close())
}

// fetchBudget is the part of --max-inflight-bytes that fetched messages may
// hold. The rest is for the copies the Bigtable client encodes of the
// batches it is writing (up to half): fetched data too, so counted in the
// same bound. Fetched messages are never more than the budget, and the
// encoded copies never more than the messages they copy, so together they
// stay within --max-inflight-bytes.
func fetchBudget(maxInflight int64, p pipeline.Config) int64 {
	return maxInflight - min(p.EncodingBytes(), maxInflight/2)
}

// readinessChecks: in the consumer group, Bigtable answering and taking
// writes, the dead-letter topic taking dead letters, a config loaded.
func readinessChecks(c *ingest.Consumer, tbl *bigtable.Table, w *sink.Writer, dlq *ingest.DeadLetterWriter, r *tenants.Reloader) []admin.Check {
	return []admin.Check{
		{Name: "kafka", Fn: func(context.Context) error {
			s := c.Status()
			if !s.Joined {
				if s.LastError != "" {
					return fmt.Errorf("not in the consumer group: %s", s.LastError)
				}
				return errors.New("not in the consumer group")
			}
			return c.Problem()
		}},
		{Name: "bigtable", Fn: func(ctx context.Context) error {
			// A point read of a key no event can have ('#' is not allowed in
			// a tenant id): cheap, and it fails when Bigtable is unreachable.
			if _, err := tbl.ReadRow(ctx, "#readiness-probe"); err != nil {
				return fmt.Errorf("bigtable read: %w", err)
			}
			// Reads can pass while every write is refused (an app profile
			// that routes nowhere, missing write permission).
			return w.Outage()
		}},
		{Name: "dead-letter", Fn: func(context.Context) error { return dlq.Problem() }},
		{Name: "config", Fn: func(context.Context) error {
			if r.Current() == nil {
				return errors.New("no tenants config loaded")
			}
			return nil
		}},
	}
}

// lastError remembers the latest error of a kind, for /status.
type lastError struct {
	mu  sync.Mutex
	err string
	at  time.Time
}

func (l *lastError) set(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	l.err, l.at = err.Error(), time.Now()
	l.mu.Unlock()
}

func (l *lastError) get() (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err, l.at
}

type statusSource struct {
	o            *runOptions
	consumer     *ingest.Consumer
	reloader     *tenants.Reloader
	stats        *pipeline.Stats
	started      time.Time
	lastWriteErr *lastError
	dlq          *ingest.DeadLetterWriter
}

type tenantCounts struct {
	TTL          string `json:"ttl"`
	Consumed     int64  `json:"consumed"`
	Written      int64  `json:"written"`
	Expired      int64  `json:"expired"`
	DeadLettered int64  `json:"dead_lettered"`
	Clamped      int64  `json:"clamped"`
}

type statusPage struct {
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	Topic   string    `json:"topic"`
	Group   string    `json:"group"`
	Table   string    `json:"table"`
	Config  struct {
		Version    string               `json:"version"`
		Strategy   string               `json:"strategy"`
		DefaultTTL string               `json:"default_ttl"`
		Tenants    map[string]string    `json:"tenants"`
		Reload     tenants.ReloadStatus `json:"reload"`
	} `json:"config"`
	Kafka      ingest.Status           `json:"kafka"`
	Lag        int64                   `json:"lag"`
	Events     map[string]tenantCounts `json:"events"`
	LastErrors map[string]string       `json:"last_errors"`
}

func (s *statusSource) status() any {
	var p statusPage
	cfg := s.reloader.Current()
	p.Version, p.Started, p.Topic, p.Group, p.Table = version(), s.started, s.o.topic, s.o.group, s.o.target().String()
	p.Config.Version, p.Config.Strategy, p.Config.DefaultTTL = cfg.Version, cfg.Policy.Strategy.String(), duration.Format(cfg.Policy.DefaultTTL)
	p.Config.Tenants = map[string]string{}
	for id, ttl := range cfg.Policy.Tenants {
		p.Config.Tenants[id] = duration.Format(ttl)
	}
	p.Config.Reload = s.reloader.Status()
	p.Kafka = s.consumer.Status()
	for _, part := range p.Kafka.Partitions {
		p.Lag += part.Lag
	}
	p.Events = map[string]tenantCounts{}
	s.stats.Each(func(id string, t *pipeline.TenantStats) {
		p.Events[id] = tenantCounts{TTL: duration.Format(cfg.Policy.TTL(id)), Consumed: t.Consumed.Load(), Written: t.Written.Load(),
			Expired: t.Expired.Load(), DeadLettered: t.DeadLettered.Load(), Clamped: t.Clamped.Load()}
	})
	p.LastErrors = map[string]string{}
	if e, at := s.lastWriteErr.get(); e != "" {
		p.LastErrors["bigtable"] = at.Format(time.RFC3339) + " " + e
	}
	if p.Kafka.LastError != "" {
		p.LastErrors["kafka"] = p.Kafka.LastError
	}
	if p.Config.Reload.LastError != "" {
		p.LastErrors["config"] = p.Config.Reload.LastError
	}
	if err := s.dlq.Problem(); err != nil {
		p.LastErrors["dead_letter"] = err.Error()
	}
	return p
}

// version is the module version, or the VCS revision of a source build.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
