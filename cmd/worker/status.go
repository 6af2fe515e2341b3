package main

import (
	"sync"
	"time"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/tenants"
)

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

// statusSource renders /status from a running worker's parts.
type statusSource struct {
	w       *worker
	started time.Time
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
	w := s.w
	cfg := w.reloader.Current()
	p.Version, p.Started, p.Topic, p.Group, p.Table = version(), s.started, w.o.kafka.Topic, w.o.kafka.Group, w.o.table.Target().String()
	p.Config.Version, p.Config.Strategy, p.Config.DefaultTTL = cfg.Version, cfg.Policy.Strategy.String(), duration.Format(cfg.Policy.DefaultTTL)
	p.Config.Tenants = map[string]string{}
	for id, ttl := range cfg.Policy.Tenants {
		p.Config.Tenants[id] = duration.Format(ttl)
	}
	p.Config.Reload = w.reloader.Status()
	p.Kafka = w.consumer.Status()
	for _, part := range p.Kafka.Partitions {
		p.Lag += part.Lag
	}
	p.Events = map[string]tenantCounts{}
	w.pipeline.Stats().Each(func(id string, t *pipeline.TenantStats) {
		p.Events[id] = tenantCounts{TTL: duration.Format(cfg.Policy.TTL(id)), Consumed: t.Consumed.Load(), Written: t.Written.Load(),
			Expired: t.Expired.Load(), DeadLettered: t.DeadLettered.Load(), Clamped: t.Clamped.Load()}
	})
	p.LastErrors = map[string]string{}
	if e, at := w.lastWriteErr.get(); e != "" {
		p.LastErrors["bigtable"] = at.Format(time.RFC3339) + " " + e
	}
	if p.Kafka.LastError != "" {
		p.LastErrors["kafka"] = p.Kafka.LastError
	}
	if p.Config.Reload.LastError != "" {
		p.LastErrors["config"] = p.Config.Reload.LastError
	}
	if err := w.dlq.Problem(); err != nil {
		p.LastErrors["dead_letter"] = err.Error()
	}
	return p
}
