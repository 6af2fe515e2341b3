package synth

import (
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/duration"
)

// Shape is how the synthetic events are laid out: the contract's field
// names, or a layout the worker reads through an input mapping. Whatever
// the shape, the verification expects the contract's rows and cells.
type Shape struct {
	Name string
	// WorkerFlags are the worker's mapping flags for this shape.
	WorkerFlags []string
	// valid builds a valid event.
	valid func(id, tenant, user string, millis int64, payload string) (value []byte, headers []kafka.Header)
	// malformed builds bad event number kind (0..3) of four kinds.
	malformed func(kind int, id, tenant string) (value []byte, headers []kafka.Header)
	// requested, when set, is the TTL an event asks for itself
	// (--ttl-from), a function of its id; ok false for none.
	requested func(id string) (ttl string, ok bool)
}

// RequestedTTL is the TTL the event with id asks for itself, when the
// shape gives events their own (--ttl-from).
func (s Shape) RequestedTTL(id string) (time.Duration, bool) {
	if s.requested == nil {
		return 0, false
	}
	text, ok := s.requested(id)
	if !ok {
		return 0, false
	}
	d, err := duration.Parse(text)
	return d, err == nil
}

// ownTTLs are what events of the own-ttl shape ask for: none, within any
// tenant's default bounds, within the longer tenants' only, and above every
// max_ttl (clamped).
var ownTTLs = [...]string{"", "30m", "1d", "400d"}

// ownTTL picks an event's request from its id, so that a replay asks for
// the same.
func ownTTL(id string) (string, bool) {
	h := fnv.New32a()
	h.Write([]byte(id))
	t := ownTTLs[h.Sum32()%uint32(len(ownTTLs))]
	return t, t != ""
}

var shapes = map[string]Shape{
	"contract": {
		Name: "contract",
		valid: func(id, tenant, user string, millis int64, payload string) ([]byte, []kafka.Header) {
			ts := time.UnixMilli(millis).UTC().Format("2006-01-02T15:04:05.000Z07:00")
			return []byte(`{"event_id":"` + id + `","tenant_id":"` + tenant + `","user_id":"` + user + `","occurred_at":"` + ts + `","payload":"` + payload + `"}`), nil
		},
		malformed: func(kind int, id, tenant string) ([]byte, []kafka.Header) {
			switch kind {
			case 0:
				return []byte(`{"event_id":"` + id + `","tenant_id":`), nil // truncated
			case 1:
				return []byte(`{"event_id":"` + id + `"}`), nil // no tenant
			case 2:
				return []byte(`{"event_id":"` + id + `#x","tenant_id":"` + tenant + `"}`), nil
			}
			return []byte("\x00\x01binary"), nil
		},
	},
	// nested is the tenant as customer_id, the ids under context, the time
	// as epoch milliseconds.
	"nested": {
		Name: "nested",
		WorkerFlags: []string{"--tenant-from", "json:customer_id", "--event-id-from", "json:context.session.id",
			"--user-from", "json:context.user.id", "--event-time-from", "json:ts", "--event-time-format", "unix-ms"},
		valid: func(id, tenant, user string, millis int64, payload string) ([]byte, []kafka.Header) {
			return []byte(`{"customer_id":"` + tenant + `","ts":` + strconv.FormatInt(millis, 10) + `,"context":{"session":{"id":"` + id +
				`"},"user":{"id":"` + user + `"}},"payload":"` + payload + `"}`), nil
		},
		malformed: func(kind int, id, tenant string) ([]byte, []kafka.Header) {
			switch kind {
			case 0:
				return []byte(`{"customer_id":"` + tenant + `","context":{"session":{"id":"` + id + `"}`), nil // truncated
			case 1:
				return []byte(`{"customer_id":"` + tenant + `","context":{"session":"` + id + `"}}`), nil // session not an object
			case 2:
				return []byte(`{"customer_id":"` + tenant + `","ts":"yesterday","context":{"session":{"id":"` + id + `"}}}`), nil // ts a string
			}
			return []byte("\x00\x01binary"), nil
		},
	},
	// header is the tenant in a record header.
	"header": {
		Name:        "header",
		WorkerFlags: []string{"--tenant-from", "header:x-tenant"},
		valid: func(id, tenant, user string, millis int64, payload string) ([]byte, []kafka.Header) {
			ts := time.UnixMilli(millis).UTC().Format("2006-01-02T15:04:05.000Z07:00")
			return []byte(`{"event_id":"` + id + `","user_id":"` + user + `","occurred_at":"` + ts + `","payload":"` + payload + `"}`),
				[]kafka.Header{{Key: "x-tenant", Value: []byte(tenant)}}
		},
		malformed: func(kind int, id, tenant string) ([]byte, []kafka.Header) {
			h := []kafka.Header{{Key: "x-tenant", Value: []byte(tenant)}}
			switch kind {
			case 0:
				return []byte(`{"event_id":"` + id + `"`), h // truncated
			case 1:
				return []byte(`{"event_id":"` + id + `"}`), nil // no header
			case 2:
				return []byte(`{"event_id":"` + id + `"}`), []kafka.Header{{Key: "x-tenant", Value: []byte(tenant + "#x")}}
			}
			return []byte("\x00\x01binary"), h
		},
	},
}

func init() {
	// own-ttl is the contract with an own TTL in header x-ttl on three
	// events in four (see ownTTLs).
	c := shapes["contract"]
	shapes["own-ttl"] = Shape{
		Name:        "own-ttl",
		WorkerFlags: []string{"--ttl-from", "header:x-ttl"},
		valid: func(id, tenant, user string, millis int64, payload string) ([]byte, []kafka.Header) {
			v, _ := c.valid(id, tenant, user, millis, payload)
			if ttl, ok := ownTTL(id); ok {
				return v, []kafka.Header{{Key: "x-ttl", Value: []byte(ttl)}}
			}
			return v, nil
		},
		malformed: c.malformed,
		requested: ownTTL,
	}
}

// Contract is the shape of the contract's field names, which the worker
// reads without mapping flags.
func Contract() Shape { return shapes["contract"] }

// ShapeFlag is the --shape flag: it sets *s to the shape named.
func ShapeFlag(s *Shape) flag.Value { return shapeValue{s} }

type shapeValue struct{ s *Shape }

func (v shapeValue) String() string {
	if v.s == nil || v.s.Name == "" {
		return "contract"
	}
	return v.s.Name
}

func (v shapeValue) Set(name string) error {
	s, ok := shapes[name]
	if !ok {
		return fmt.Errorf("want one of %s", strings.Join(slices.Sorted(maps.Keys(shapes)), ", "))
	}
	*v.s = s
	return nil
}
