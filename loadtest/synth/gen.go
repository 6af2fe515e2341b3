// Package synth makes the load test's synthetic click events: a tenant mix,
// Zipf-skewed users, a payload size, a share of malformed events, laid out
// in a shape the worker reads. Each event is kept as a small Sent, from
// which the verification derives what the worker should have written.
package synth

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// Mix is the tenant mix of the synthetic events.
type Mix struct {
	tenants []string
	cum     []float64 // cumulative weights, last == 1
}

// ParseMix reads "acme=5,globex=1" over the tenants given; tenants not
// named get weight 1, and "*" is an unlisted tenant (the default TTL).
func ParseMix(tenants []string, weights string) (Mix, error) {
	w := map[string]float64{}
	for _, t := range tenants {
		w[t] = 1
	}
	if weights != "" {
		for _, part := range strings.Split(weights, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			f, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil || f < 0 {
				return Mix{}, fmt.Errorf("--weights %q: want tenant=weight pairs separated by commas", part)
			}
			w[k] = f
		}
	}
	var m Mix
	for t := range w {
		m.tenants = append(m.tenants, t)
	}
	sort.Strings(m.tenants)
	total := 0.0
	for _, t := range m.tenants {
		total += w[t]
	}
	if total == 0 {
		return Mix{}, fmt.Errorf("--weights: all zero")
	}
	acc := 0.0
	for _, t := range m.tenants {
		acc += w[t] / total
		m.cum = append(m.cum, acc)
	}
	m.cum[len(m.cum)-1] = 1
	return m, nil
}

// Tenants are the tenants of the mix, sorted, "*" among them if weighed;
// a Sent's Tenant indexes them.
func (m Mix) Tenants() []string { return m.tenants }

func (m Mix) pick(r *rand.Rand) int {
	x := r.Float64()
	return sort.SearchFloat64s(m.cum, x)
}

// TenantName is the tenant id of tenant i, "*" turned into an id no
// tenants file lists.
func (m Mix) TenantName(i int) string {
	if m.tenants[i] == "*" {
		return "unlisted"
	}
	return m.tenants[i]
}

// Sent is what the verification needs of a produced event. Strings are
// derived from the indexes, so a record is small.
type Sent struct {
	Millis int64 // occurred_at, whole milliseconds
	User   uint32
	Tenant uint16 // index into the mix's tenants
	Valid  bool
}

// Config says what events a Generator makes. Left zero, the shape is the
// contract, the users 10,000 and the Zipf exponent 1.1: loadtest's
// defaults, which its bench and rollout keep.
type Config struct {
	Run          string // prefix of the event ids
	Mix          Mix
	Shape        Shape
	Users        uint64 // distinct users, at least 2
	ZipfS        float64
	PayloadBytes int
	Malformed    float64 // share of malformed events
	Seed         uint64
}

// The user distribution of a load that does not say otherwise.
const (
	DefaultUsers = 10000
	DefaultZipfS = 1.1
)

// Generator makes synthetic click events.
type Generator struct {
	run       string
	mix       Mix
	zipf      *rand.Zipf
	rand      *rand.Rand
	payload   string
	malformed float64
	shape     Shape
}

// New returns a generator of the events c describes.
func New(c Config) *Generator {
	if c.Shape.Name == "" {
		c.Shape = Contract()
	}
	c.Users = cmp.Or(c.Users, DefaultUsers)
	c.ZipfS = cmp.Or(c.ZipfS, DefaultZipfS)
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	return &Generator{
		run:       c.Run,
		mix:       c.Mix,
		zipf:      rand.NewZipf(r, c.ZipfS, 1, c.Users-1),
		rand:      r,
		payload:   strings.Repeat("x", max(0, c.PayloadBytes)),
		malformed: c.Malformed,
		shape:     c.Shape,
	}
}

// Run is the run the event ids begin with.
func (g *Generator) Run() string { return g.run }

// Shape is the layout the events are made in.
func (g *Generator) Shape() Shape { return g.shape }

// Mix is the tenant mix the events follow.
func (g *Generator) Mix() Mix { return g.mix }

// EventID is the id of event number seq.
func (g *Generator) EventID(seq int) string { return g.run + "-" + strconv.Itoa(seq) }

// UserName is the user id of a Sent's User.
func UserName(u uint32) string { return "u" + strconv.FormatUint(uint64(u), 10) }

// Next returns event number seq, keyed by its user, and its record.
func (g *Generator) Next(seq int, at time.Time) (kafka.Message, Sent) {
	rec := Sent{Millis: at.UnixMilli(), User: uint32(g.zipf.Uint64()), Tenant: uint16(g.mix.pick(g.rand)), Valid: true}
	user := UserName(rec.User)
	msg := kafka.Message{Key: []byte(user)}
	if g.rand.Float64() < g.malformed {
		rec.Valid = false
		// Rotate through kinds of bad input.
		msg.Value, msg.Headers = g.shape.malformed(seq%4, g.EventID(seq), g.mix.TenantName(int(rec.Tenant)))
		return msg, rec
	}
	msg.Value, msg.Headers = g.shape.valid(g.EventID(seq), g.mix.TenantName(int(rec.Tenant)), user, rec.Millis, g.payload)
	return msg, rec
}
