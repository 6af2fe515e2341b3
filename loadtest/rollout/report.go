package rollout

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cellttl/cellttl/testkit/lab"
)

// result is what a run saw.
type result struct {
	name         string
	loadStart    time.Time // the producer started
	rolloutStart time.Time // the first new worker started
	rolloutEnd   time.Time // the last old worker exited
	windowEnd    time.Time // the cool-down ended, the load stopped
	steps        []step
	procs        []*proc
	logs         map[string]workerLog
	samples      []sample
	failedPolls  int
	produced     int64 // events in the topic
	load         loadSummary
	cpu          cpuUse // from the load's start to the window's end
}

// steadyFrom is how long after the load starts the steady window opens:
// the first commits land meanwhile.
const steadyFrom = 5 * time.Second

// print writes the summary.
func (res *result) print(w io.Writer, o Options) {
	heartbeat := o.SessionTimeout / 10
	goal := 2*heartbeat + o.CommitInterval
	rel := func(t time.Time) string { return fmt.Sprintf("+%.1fs", t.Sub(res.rolloutStart).Seconds()) }
	fmt.Fprintf(w, "\n== rollout %s: %s\n", res.name, o.WorkerBin)
	fmt.Fprintf(w, "%d workers, %d partitions, %d events/s; surge %d, maxUnavailable 0, min-ready %s, readiness asked every %s\n",
		o.Workers, o.Partitions, o.Rate, o.Surge, o.MinReady, o.Probe)
	fmt.Fprintf(w, "goal: no stretch longer than 2 × heartbeat (%s) + commit interval (%s) = %s\n", heartbeat, o.CommitInterval, goal)
	for i, s := range res.steps {
		var parts []string
		for _, p := range s.added {
			parts = append(parts, fmt.Sprintf("%s started %s ready %s", p.name, rel(p.Started), rel(p.ready)))
		}
		for _, p := range s.replaced {
			parts = append(parts, fmt.Sprintf("%s SIGTERM %s exited %s (drain %.1fs)", p.name, rel(p.termAt), rel(p.Exited()), p.Exited().Sub(p.termAt).Seconds()))
		}
		fmt.Fprintf(w, "  step %d: %s\n", i+1, strings.Join(parts, "; "))
	}

	steady := measure(res.samples, res.loadStart.Add(steadyFrom), res.rolloutStart, goal, 2*time.Second)
	roll := measure(res.samples, res.rolloutStart, res.windowEnd, goal, 2*time.Second)
	steadyGens := generations(res.logs, res.loadStart, res.rolloutStart).count
	gens := generations(res.logs, res.rolloutStart, res.windowEnd)
	fmt.Fprintf(w, "warm-up, %s with no worker change: %d generations; longest stretch without a commit while lagging: one partition %s, whole group %s\n",
		res.rolloutStart.Sub(res.loadStart.Add(steadyFrom)).Round(time.Second), steadyGens, secs(steady.partition.length), secs(steady.group.length))
	fmt.Fprintf(w, "rollout: %s from the first new worker's start to the last old worker's exit; window to %s (cool-down)\n",
		secs(res.rolloutEnd.Sub(res.rolloutStart)), rel(res.windowEnd))
	fmt.Fprintf(w, "  generations (rebalances): %d; partitions that changed owner: %d; latest take-up of a generation by a worker: %s after the first (generation %d)\n",
		gens.count, gens.moves, secs(gens.late), gens.lateGen)
	fmt.Fprintf(w, "  longest stretch, one partition: %s (partition %d, from %s)%s\n",
		secs(roll.partition.length), roll.partition.partition, rel(roll.partition.from), verdict(roll.partition.length, goal))
	fmt.Fprintf(w, "  longest stretch, whole group:   %s (from %s)%s\n", secs(roll.group.length), rel(roll.group.from), verdict(roll.group.length, goal))
	fmt.Fprintf(w, "  stretches of one partition over the goal: %d\n", roll.over)
	var stalls []string
	for _, s := range roll.groupOver {
		stalls = append(stalls, fmt.Sprintf("%s at %s", secs(s.length), rel(s.from)))
	}
	fmt.Fprintf(w, "  whole-group stretches of 2s or more: %s\n", orNone(strings.Join(stalls, ", ")))
	fmt.Fprintf(w, "  offsets read %d times in the window, at most %s apart; %d reads failed over the run\n", roll.samples, secs(roll.maxGap), res.failedPolls)

	var settled, consumed int64
	var missing, killed []string
	errs := 0
	for _, p := range res.procs {
		l := res.logs[p.name]
		settled += l.totals.settled()
		consumed += l.totals.Consumed
		errs += l.errors
		if !l.stopped {
			missing = append(missing, p.name)
		}
		if p.Killed() {
			killed = append(killed, p.name)
		}
	}
	fmt.Fprintf(w, "events: %d produced; %d written (or dead-lettered, or expired) by the %d workers over the run, %d consumed\n",
		res.produced, settled, len(res.procs), consumed)
	if len(missing) > 0 {
		fmt.Fprintf(w, "  no totals from %s (no \"worker stopping\" line): events rewritten unknown\n", strings.Join(missing, ", "))
	} else {
		fmt.Fprintf(w, "  events rewritten (written more than once): %d (%.3f%% of produced)\n", settled-res.produced, 100*float64(settled-res.produced)/float64(max(res.produced, 1)))
	}
	fmt.Fprintf(w, "  workers killed after the grace period: %s; ERROR log lines: %d\n", orNone(strings.Join(killed, ", ")), errs)
	fmt.Fprintf(w, "load average (1 min) during the load: %s\n", res.load)
	fmt.Fprintf(w, "CPU from the load's start to the window's end: %s\n", res.cpu)
	if o.Command != "" {
		fmt.Fprintf(w, "command: %s\n", o.Command)
	}
}

func verdict(d, goal time.Duration) string {
	if d > goal {
		return fmt.Sprintf(": over the goal of %s", goal)
	}
	return fmt.Sprintf(": within the goal of %s", goal)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// loadWatch samples the machine's 1-minute load average: the workers,
// the broker and the emulator share the cores with whatever else runs.
type loadWatch struct {
	mu   sync.Mutex
	seen []float64
}

func (l *loadWatch) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if v, err := lab.LoadAverage(); err == nil {
			l.mu.Lock()
			l.seen = append(l.seen, v)
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// loadSummary is the load averages seen.
type loadSummary struct{ min, mean, max float64 }

func (s loadSummary) String() string {
	return fmt.Sprintf("min %.2f, mean %.2f, max %.2f", s.min, s.mean, s.max)
}

func (l *loadWatch) summary() loadSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) == 0 {
		return loadSummary{}
	}
	s := loadSummary{min: l.seen[0], max: l.seen[0]}
	sum := 0.0
	for _, v := range l.seen {
		s.min, s.max = min(s.min, v), max(s.max, v)
		sum += v
	}
	s.mean = sum / float64(len(l.seen))
	return s
}
