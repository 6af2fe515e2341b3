package rollout

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// caughtUp is what a commit function returns for a partition that has
// received nothing new and whose commit is at its end.
const caughtUp = -2

// timeline builds samples every 100 ms over [0, until): the end offset of
// each partition grows by 10 a sample, and commit(p, t) says where the
// group's commit of partition p stands at t; a partition caught up
// receives nothing, its end where its commit is.
func timeline(t0 time.Time, parts int, until time.Duration, commit func(p int, at time.Duration) int64) []sample {
	var out []sample
	end := make([]int64, parts)
	for at := time.Duration(0); at < until; at += 100 * time.Millisecond {
		s := sample{at: t0.Add(at), committed: make([]int64, parts), end: make([]int64, parts)}
		for p := range parts {
			c := commit(p, at)
			if c != caughtUp {
				end[p] += 10
			} else {
				c = end[p]
			}
			s.end[p], s.committed[p] = end[p], c
		}
		out = append(out, s)
	}
	return out
}

// everySecond is a commit that moves each second.
func everySecond(at time.Duration) int64 { return int64(at / time.Second) }

func TestMeasureFindsTheStretchesWithoutACommit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	samples := timeline(t0, 2, 30*time.Second, func(p int, a time.Duration) int64 {
		switch {
		case a >= 10*time.Second && a < 14*time.Second: // the whole group stops
			return everySecond(10 * time.Second)
		case p == 0 && a >= 16*time.Second && a < 24*time.Second: // no lag, so nothing to commit
			return caughtUp
		case p == 1 && a >= 3*time.Second && a < 8*time.Second: // one partition stops
			return everySecond(3 * time.Second)
		}
		return everySecond(a)
	})
	r := measure(samples, t0, at(30), 4500*time.Millisecond, 2*time.Second)
	if r.partition.partition != 1 || r.partition.length != 5*time.Second || !r.partition.from.Equal(at(3)) {
		t.Errorf("longest of one partition: partition %d, %s from %s; want partition 1, 5s from +3s (a partition without lag is not waiting)",
			r.partition.partition, r.partition.length, r.partition.from.Sub(t0))
	}
	if r.group.length != 4*time.Second || !r.group.from.Equal(at(10)) {
		t.Errorf("longest of the whole group: %s from %s; want 4s from +10s (a partition that moves ends the group's stretch)", r.group.length, r.group.from.Sub(t0))
	}
	if r.over != 1 {
		t.Errorf("stretches of one partition over 4.5s: %d, want 1", r.over)
	}
	if len(r.groupOver) != 1 || r.groupOver[0].length != 4*time.Second {
		t.Errorf("whole-group stretches of 2s or more: %+v, want the one of 4s", r.groupOver)
	}

	// A window after the stretches sees none of them.
	late := measure(samples, at(25), at(30), 4500*time.Millisecond, 2*time.Second)
	if late.partition.length > 1100*time.Millisecond || late.group.length > 1100*time.Millisecond || late.over != 0 {
		t.Errorf("window +25s..+30s: longest %s (partition), %s (group), %d over; want commits every second only", late.partition.length, late.group.length, late.over)
	}
	if late.samples != 50 || late.maxGap != 100*time.Millisecond {
		t.Errorf("window +25s..+30s: %d samples at most %s apart, want 50 at 100ms", late.samples, late.maxGap)
	}
}

func TestMeasureOfNoSamples(t *testing.T) {
	r := measure(nil, time.Now(), time.Now(), time.Second, time.Second)
	if r.partition.length != 0 || r.group.length != 0 || r.samples != 0 {
		t.Errorf("no samples: %+v", r)
	}
}
