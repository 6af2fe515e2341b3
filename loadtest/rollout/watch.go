package rollout

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// sample is, at one moment, the group's committed offset and the log's end
// offset of every partition of the topic.
type sample struct {
	at        time.Time
	committed []int64 // -1: nothing committed yet
	end       []int64
}

// lagging reports whether partition p had records past its committed
// offset.
func (s *sample) lagging(p int) bool { return s.end[p] > max(s.committed[p], 0) }

// watcher polls the group's committed offsets (OffsetFetch) and the topic's
// end offsets (ListOffsets) through kafka-go's Client, as the broker sees
// them: what the workers say of themselves plays no part.
type watcher struct {
	client *kafka.Client
	topic  string
	group  string
	parts  int

	mu      sync.Mutex
	samples []sample
	failed  int // polls that returned an error
}

// run polls every interval until ctx ends.
func (w *watcher) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s, err := w.poll(ctx)
		w.mu.Lock()
		if err != nil {
			w.failed++
		} else {
			w.samples = append(w.samples, s)
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll reads the committed offsets, then the end offsets: an end read
// after the commit it is compared with is never below it.
func (w *watcher) poll(ctx context.Context) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ids := make([]int, w.parts)
	reqs := make([]kafka.OffsetRequest, w.parts)
	for p := range ids {
		ids[p], reqs[p] = p, kafka.LastOffsetOf(p)
	}
	at := time.Now()
	of, err := w.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: w.group, Topics: map[string][]int{w.topic: ids}})
	if err != nil {
		return sample{}, fmt.Errorf("offset fetch of group %s: %w", w.group, err)
	}
	if of.Error != nil {
		return sample{}, fmt.Errorf("offset fetch of group %s: %w", w.group, of.Error)
	}
	lo, err := w.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{w.topic: reqs}})
	if err != nil {
		return sample{}, fmt.Errorf("end offsets of %s: %w", w.topic, err)
	}
	s := sample{at: at, committed: make([]int64, w.parts), end: make([]int64, w.parts)}
	seen := 0
	for _, p := range of.Topics[w.topic] {
		if p.Error != nil || p.Partition < 0 || p.Partition >= w.parts {
			return sample{}, fmt.Errorf("committed offset of partition %d: %v", p.Partition, p.Error)
		}
		s.committed[p.Partition] = p.CommittedOffset
		seen++
	}
	for _, p := range lo.Topics[w.topic] {
		if p.Error != nil || p.Partition < 0 || p.Partition >= w.parts {
			return sample{}, fmt.Errorf("end offset of partition %d: %v", p.Partition, p.Error)
		}
		s.end[p.Partition] = p.LastOffset
		seen++
	}
	if seen != 2*w.parts {
		return sample{}, fmt.Errorf("offsets of %d partitions of %s, want %d", seen/2, w.topic, w.parts)
	}
	return s, nil
}

// snapshot returns the samples so far and the count of failed polls.
func (w *watcher) snapshot() ([]sample, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sample(nil), w.samples...), w.failed
}

// stretch is a span during which a partition (or, for the whole group,
// every partition) had lag and saw no commit advance: from the sample at
// which its committed offset last moved (or it last had no lag) to the
// sample at which it moved again (or the lag was gone). Its length is
// known to within a poll interval on either side.
type stretch struct {
	from      time.Time
	length    time.Duration
	partition int // -1 for the whole group
}

// stretches is what measure finds in a window.
type stretches struct {
	partition stretch       // the longest of any one partition
	group     stretch       // the longest of the whole group: no partition's commit moved
	over      int           // stretches of single partitions longer than the goal
	groupOver []stretch     // the whole group's stretches of at least minReport, in time order
	samples   int           // samples in the window
	maxGap    time.Duration // the longest between a sample in the window and the one before
}

// measure finds, among samples, the stretches without a commit advance
// that overlap [from, to]: of each partition and of the whole group. A
// stretch of one partition ends when its committed offset moves or its
// lag is gone; the whole group's when any partition's committed offset
// moves or no partition has lag.
func measure(samples []sample, from, to time.Time, goal, minReport time.Duration) stretches {
	var r stretches
	r.partition.partition, r.group.partition = -1, -1
	if len(samples) == 0 {
		return r
	}
	parts := len(samples[0].committed)
	since := make([]time.Time, parts)
	groupSince := samples[0].at
	for p := range since {
		since[p] = samples[0].at
	}
	overlaps := func(s, e time.Time) bool { return s.Before(to) && e.After(from) }
	for i := range samples {
		if at := samples[i].at; !at.Before(from) && !at.After(to) {
			r.samples++
			if i > 0 {
				r.maxGap = max(r.maxGap, at.Sub(samples[i-1].at))
			}
		}
	}
	end := func(p int, s, e time.Time) {
		if !overlaps(s, e) {
			return
		}
		st := stretch{from: s, length: e.Sub(s), partition: p}
		if p < 0 {
			if st.length > r.group.length {
				r.group = st
			}
			if st.length >= minReport {
				r.groupOver = append(r.groupOver, st)
			}
			return
		}
		if st.length > r.partition.length {
			r.partition = st
		}
		if st.length > goal {
			r.over++
		}
	}
	for i := 1; i < len(samples); i++ {
		prev, cur := &samples[i-1], &samples[i]
		moved, anyLag := false, false
		for p := range parts {
			advanced := cur.committed[p] != prev.committed[p]
			lagging := cur.lagging(p)
			moved = moved || advanced
			anyLag = anyLag || lagging
			if advanced || !lagging {
				end(p, since[p], cur.at)
				since[p] = cur.at
			}
		}
		if moved || !anyLag {
			end(-1, groupSince, cur.at)
			groupSince = cur.at
		}
	}
	last := samples[len(samples)-1].at
	for p := range parts {
		end(p, since[p], last)
	}
	end(-1, groupSince, last)
	return r
}
