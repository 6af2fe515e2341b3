package rollout

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// workerLog is what a worker's JSON log says of its run: the generations
// it joined, with their partitions, and the totals it logs as it stops.
type workerLog struct {
	joins   []join
	stopped bool // the "worker stopping" line was seen
	totals  totals
	errors  int // lines at level ERROR
}

// join is one generation a worker joined.
type join struct {
	at         time.Time
	generation int32
	partitions []int
}

// totals are the counts a worker logs as it stops, over its whole run.
type totals struct {
	Consumed     int64 `json:"consumed"`
	Written      int64 `json:"written"`
	Expired      int64 `json:"expired"`
	DeadLettered int64 `json:"dead_lettered"`
}

// settled is every event the worker wrote, dead-lettered or skipped as
// expired: each is one row write (or letter) of one delivery.
func (t totals) settled() int64 { return t.Written + t.Expired + t.DeadLettered }

// logLine is the part of a worker's log line read here; both builds a
// run compares log these fields under these names.
type logLine struct {
	Time       time.Time `json:"time"`
	Level      string    `json:"level"`
	Msg        string    `json:"msg"`
	Generation *int32    `json:"generation"`
	Partitions []int     `json:"partitions"`
	totals
}

// readLog reads a worker's log file.
func readLog(path string) (workerLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return workerLog{}, err
	}
	defer f.Close()
	l, err := parseLog(f)
	if err != nil {
		return workerLog{}, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// parseLog reads the lines of a worker's JSON log; lines that are not
// JSON (a panic, a library's own output) are passed over.
func parseLog(r io.Reader) (workerLog, error) {
	var l workerLog
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var line logLine
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if line.Level == "ERROR" {
			l.errors++
		}
		switch line.Msg {
		case "joined consumer group":
			if line.Generation != nil {
				l.joins = append(l.joins, join{at: line.Time, generation: *line.Generation, partitions: line.Partitions})
			}
		case "worker stopping":
			l.stopped, l.totals = true, line.totals
		}
	}
	return l, sc.Err()
}

// genStats is what the workers' logs say of the generations in a window.
type genStats struct {
	count int // generations some worker joined in the window
	moves int // partitions owned by another worker than in the generation before
	// late is the longest a worker took to take up a generation after
	// the first worker did (the log line is written as the worker starts
	// fetching it): kafka-go has joined it meanwhile, but the worker's
	// partitions wait.
	late    time.Duration
	lateGen int32
}

// generations returns, for the generations that some worker joined within
// [from, to] (each at the first join seen), their count, how many
// partitions changed owner in them, and the latest take-up of one.
func generations(logs map[string]workerLog, from, to time.Time) genStats {
	type gen struct {
		first, last time.Time
		owners      map[int]string // partition → worker name
	}
	byID := map[int32]*gen{}
	for name, l := range logs {
		for _, j := range l.joins {
			g := byID[j.generation]
			if g == nil {
				g = &gen{first: j.at, last: j.at, owners: map[int]string{}}
				byID[j.generation] = g
			}
			if j.at.Before(g.first) {
				g.first = j.at
			}
			if j.at.After(g.last) {
				g.last = j.at
			}
			for _, p := range j.partitions {
				g.owners[p] = name
			}
		}
	}
	var ids []int32
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var st genStats
	var last map[int]string
	for _, id := range ids {
		g := byID[id]
		if !g.first.Before(from) && !g.first.After(to) {
			st.count++
			for p, owner := range g.owners {
				if prev, ok := last[p]; ok && prev != owner {
					st.moves++
				}
			}
			if late := g.last.Sub(g.first); late > st.late {
				st.late, st.lateGen = late, id
			}
		}
		last = g.owners
	}
	return st
}
