package main

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// mix is the tenant mix of the synthetic events.
type mix struct {
	tenants []string
	cum     []float64 // cumulative weights, last == 1
}

// parseMix reads "acme=5,globex=1" over the tenants given; tenants not
// named get weight 1, and "*" is an unlisted tenant (the default TTL).
func parseMix(tenants []string, weights string) (mix, error) {
	w := map[string]float64{}
	for _, t := range tenants {
		w[t] = 1
	}
	if weights != "" {
		for _, part := range strings.Split(weights, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			f, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil || f < 0 {
				return mix{}, fmt.Errorf("--weights %q: want tenant=weight pairs separated by commas", part)
			}
			w[k] = f
		}
	}
	var m mix
	for t := range w {
		m.tenants = append(m.tenants, t)
	}
	sort.Strings(m.tenants)
	total := 0.0
	for _, t := range m.tenants {
		total += w[t]
	}
	if total == 0 {
		return mix{}, fmt.Errorf("--weights: all zero")
	}
	acc := 0.0
	for _, t := range m.tenants {
		acc += w[t] / total
		m.cum = append(m.cum, acc)
	}
	m.cum[len(m.cum)-1] = 1
	return m, nil
}

func (m mix) pick(r *rand.Rand) int {
	x := r.Float64()
	return sort.SearchFloat64s(m.cum, x)
}

// tenantName turns "*" into an id no tenants file lists.
func (m mix) tenantName(i int) string {
	if m.tenants[i] == "*" {
		return "unlisted"
	}
	return m.tenants[i]
}

// record is what the verification needs of a produced event. Strings are
// derived from the indexes, so a record is small.
type record struct {
	millis int64 // occurred_at, whole milliseconds
	user   uint32
	tenant uint16
	valid  bool
}

// generator makes synthetic click events.
type generator struct {
	run       string
	mix       mix
	zipf      *rand.Zipf
	rand      *rand.Rand
	payload   string
	malformed float64
	shape     shape
}

func newGenerator(run string, m mix, sh shape, users uint64, zipfS float64, payloadBytes int, malformed float64, seed uint64) *generator {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &generator{
		run:       run,
		mix:       m,
		zipf:      rand.NewZipf(r, zipfS, 1, users-1),
		rand:      r,
		payload:   strings.Repeat("x", max(0, payloadBytes)),
		malformed: malformed,
		shape:     sh,
	}
}

func (g *generator) eventID(seq int) string { return g.run + "-" + strconv.Itoa(seq) }

func userName(u uint32) string { return "u" + strconv.FormatUint(uint64(u), 10) }

// next returns event number seq, keyed by its user, and its record.
func (g *generator) next(seq int, at time.Time) (kafka.Message, record) {
	rec := record{millis: at.UnixMilli(), user: uint32(g.zipf.Uint64()), tenant: uint16(g.mix.pick(g.rand)), valid: true}
	user := userName(rec.user)
	msg := kafka.Message{Key: []byte(user)}
	if g.rand.Float64() < g.malformed {
		rec.valid = false
		// Rotate through kinds of bad input.
		msg.Value, msg.Headers = g.shape.malformed(seq%4, g.eventID(seq), g.mix.tenantName(int(rec.tenant)))
		return msg, rec
	}
	msg.Value, msg.Headers = g.shape.valid(g.eventID(seq), g.mix.tenantName(int(rec.tenant)), user, rec.millis, g.payload)
	return msg, rec
}
