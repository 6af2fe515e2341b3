package main

import (
	"cmp"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/schema/registry"
	"github.com/cellttl/cellttl/tenants"
)

// statusSource renders /status from a running worker's parts.
type statusSource struct {
	w       *worker
	started time.Time
}

type tenantCounts struct {
	TTL string `json:"ttl"`
	eventCounts
}

// eventCounts is what happened to events: of one tenant, or of all (its
// fields are pipeline.Totals', which converts to it).
type eventCounts struct {
	Consumed     int64 `json:"consumed"`
	Written      int64 `json:"written"`
	Expired      int64 `json:"expired"`
	DeadLettered int64 `json:"dead_lettered"`
	Clamped      int64 `json:"clamped"`
	// Erased: skipped because the erasure ledger covers the event's user
	// and time (worker forget).
	Erased int64 `json:"erased"`
	// TTLClamped: events whose own TTL (--ttl-from) was clamped to their
	// tenant's min_ttl or max_ttl.
	TTLClamped int64 `json:"ttl_clamped"`
}

// deadLetterTopic is a dead-letter topic's retention as last checked.
type deadLetterTopic struct {
	Topic         string `json:"topic"`
	Retention     string `json:"retention"`
	Segment       string `json:"segment"`
	CleanupPolicy string `json:"cleanup_policy"`
	// KeepsUpTo is the longest a letter produced now stays readable; ""
	// when the topic keeps no payload. Stamping is how its records are
	// stamped, which KeepsUpTo counts.
	KeepsUpTo string `json:"keeps_up_to,omitempty"`
	Stamping  string `json:"stamping,omitempty"`
	// Partitions and Replicas are the topic's; ShortOf says where they,
	// or its stamping, fall short of what the worker creates it with.
	Partitions int    `json:"partitions,omitempty"`
	Replicas   int    `json:"replicas,omitempty"`
	ShortOf    string `json:"short_of,omitempty"`
	// Ahead names a record the topic holds stamped past what its settings
	// allow now, which keeps every later letter as long as it says.
	Ahead   string `json:"ahead,omitempty"`
	Problem string `json:"problem,omitempty"`
}

type statusPage struct {
	Version  string    `json:"version"`
	Revision string    `json:"revision"`
	Started  time.Time `json:"started"`
	Topic    string    `json:"topic"`
	Group    string    `json:"group"`
	Table    string    `json:"table"`
	// TimestampGranularity is the table's, read at start: cellttl's
	// millisecond timestamps are valid under millis and micros alike.
	TimestampGranularity string `json:"timestamp_granularity,omitempty"`
	// BigtableEmulator is BIGTABLE_EMULATOR_HOST when it is set: every
	// Bigtable request goes there, without credentials.
	BigtableEmulator string `json:"bigtable_emulator,omitempty"`
	Config           struct {
		Version    string `json:"version"`
		Strategy   string `json:"strategy"`
		DefaultTTL string `json:"default_ttl"`
		// Tenants maps each tenant to its TTL; left out of the brief page.
		Tenants  any                  `json:"tenants,omitempty"`
		Unlisted string               `json:"unlisted_tenants"`
		Reload   tenants.ReloadStatus `json:"reload"`
	} `json:"config"`
	// Unlisted counts events of tenants the file does not list, and names
	// the most frequent that lie near a listed tenant (a misspelt id).
	Unlisted struct {
		Events int64 `json:"total"`
		// Top is on the page with ?tenants=true only: they are tenant ids.
		Top []pipeline.UnlistedCount `json:"top,omitempty"`
	} `json:"unlisted"`
	// DeadLetterTopics says how long each dead-letter topic keeps a letter.
	DeadLetterTopics []deadLetterTopic `json:"dead_letter_topics"`
	Kafka            ingest.Status     `json:"kafka"`
	// RecordTimestamps says whether producers can stamp the future.
	RecordTimestamps kafkaconn.RecordTimes `json:"record_timestamps"`
	// SchemaRegistry is the cache of schemas and any wait for the
	// registry; absent for JSON values.
	SchemaRegistry *registry.Status `json:"schema_registry,omitempty"`
	// Erasures is the erasure ledger in force: a record written before
	// loaded_at is obeyed.
	Erasures erasure.Status `json:"erasures"`
	Lag      int64          `json:"lag"`
	// Events maps each tenant counted to its counts; left out of the brief
	// page.
	Events any `json:"events,omitempty"`
	// TenantsNext, on a page of tenants that is not the last, is the
	// after= of the next (?tenants=true&after=...).
	TenantsNext string            `json:"tenants_next,omitempty"`
	LastErrors  map[string]string `json:"last_errors"`
	Totals      eventCounts       `json:"totals"`
}

// status renders /status. Only with ?tenants=true does it list the tenants
// (the TTLs in force and the counts per tenant): who the customers are and
// what they are contracted for is not for everyone who reaches the admin
// port, and with thousands of tenants the lists make the page hundreds of
// KB and cost the worker milliseconds of CPU per request.
func (s *statusSource) status(q url.Values) any {
	full := q.Get("tenants") == "true"
	var p statusPage
	w := s.w
	cfg := w.reloader.Current()
	p.Version, p.Revision, p.Started, p.Topic, p.Group, p.Table = version(), revision(), s.started, w.o.kafka.Topic, w.o.kafka.Group, w.o.table.Target().String()
	p.TimestampGranularity = string(w.granularity)
	p.Config.Version, p.Config.Strategy, p.Config.DefaultTTL = cfg.Version, cfg.Policy.Strategy.String(), duration.Format(cfg.Policy.DefaultTTL)
	var page map[string]bool
	if full {
		page, p.TenantsNext = tenantPage(cfg, w.pipeline.Stats(), q)
		ttls := make(map[string]string, len(page))
		for id, ttl := range cfg.Policy.Tenants {
			if page[id] {
				ttls[id] = duration.Format(ttl)
			}
		}
		p.Config.Tenants = ttls
	}
	p.Config.Reload = w.reloader.Status()
	p.Config.Unlisted = string(cmp.Or(cfg.Unlisted, tenants.UnlistedDefaultTTL))
	p.BigtableEmulator = os.Getenv("BIGTABLE_EMULATOR_HOST")
	p.Kafka = w.consumer.Status()
	p.Erasures = w.erasures.Status()
	p.RecordTimestamps = w.times.Status()
	if w.schemas != nil {
		st := w.schemas.Status()
		p.SchemaRegistry = &st
	}
	for _, part := range p.Kafka.Partitions {
		p.Lag += part.Lag
	}
	stats := w.pipeline.Stats()
	p.Totals = eventCounts(stats.Totals())
	p.Unlisted.Events = stats.UnlistedTotal()
	if full {
		// Misspelt tenant ids, as the tenants' own rows: on the full page
		// only, and never an id a producer chose.
		p.Unlisted.Top = pipeline.Named(stats.TopUnlisted(10), cfg.NearMiss)
	}
	for _, r := range w.dlq.Topics() {
		t := deadLetterTopic{Topic: r.Topic, Retention: duration.Format(r.Retention), Segment: duration.Format(r.Segment), CleanupPolicy: r.Policy,
			Partitions: r.Partitions, Replicas: r.Replicas, ShortOf: r.ShortOf, Ahead: r.Ahead}
		if r.Retention < 0 {
			t.Retention = "forever"
		}
		if r.Keeps > 0 {
			t.KeepsUpTo = duration.Format(r.Keeps)
		}
		if r.Stamping.Type != "" {
			t.Stamping = r.Stamping.Describe()
		}
		if r.Problem != nil {
			t.Problem = r.Problem.Error()
		}
		p.DeadLetterTopics = append(p.DeadLetterTopics, t)
	}
	if full {
		events := map[string]tenantCounts{}
		stats.Each(func(id string, t *pipeline.TenantStats) {
			if !page[id] {
				return
			}
			events[id] = tenantCounts{TTL: duration.Format(cfg.Policy.TTL(id)), eventCounts: eventCounts{Consumed: t.Consumed.Load(),
				Written: t.Written.Load(), Expired: t.Expired.Load(), DeadLettered: t.DeadLettered.Load(), Clamped: t.Clamped.Load(), Erased: t.Erased.Load(),
				TTLClamped: t.TTLClampedMin.Load() + t.TTLClampedMax.Load()}}
		})
		p.Events = events
	}
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

// Pages of tenants: 100,000 tenants make a /status of megabytes.
const (
	defaultTenantPage = 1000
	maxTenantPage     = 10000
)

// tenantPage is the page of tenants ?tenants=true asks for: the ids of the
// file and of the counts, in order, after= the last of the page before,
// limit= of them (1,000 by default, at most 10,000); next is the after= of
// the next page, "" on the last.
func tenantPage(cfg *tenants.Config, stats *pipeline.Stats, q url.Values) (page map[string]bool, next string) {
	all := make(map[string]bool, len(cfg.Policy.Tenants))
	for id := range cfg.Policy.Tenants {
		all[id] = true
	}
	stats.Each(func(id string, _ *pipeline.TenantStats) { all[id] = true })
	ids := slices.Sorted(maps.Keys(all))
	limit := defaultTenantPage
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		limit = min(n, maxTenantPage)
	}
	from, _ := slices.BinarySearch(ids, q.Get("after"))
	if after := q.Get("after"); from < len(ids) && ids[from] == after {
		from++
	}
	ids = ids[from:]
	if len(ids) > limit {
		ids, next = ids[:limit], ids[limit-1]
	}
	page = make(map[string]bool, len(ids))
	for _, id := range ids {
		page[id] = true
	}
	return page, next
}
