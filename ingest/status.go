package ingest

import (
	"errors"
	"fmt"
	"time"
)

// PartitionStatus is what the consumer knows of one owned partition.
type PartitionStatus struct {
	Partition int `json:"partition"`
	// Lag is the messages between the next to fetch and the end of what
	// is read: the last stable offset under read_committed, the high
	// watermark under read_uncommitted.
	Lag       int64 `json:"lag"`
	Committed int64 `json:"committed"` // -1 when neither the group nor this member committed yet
	// CommittedLag is the messages between the committed offset (the
	// log's start when none is) and the end of what is read: what a
	// restart would read again or still has to read. -1 while the log's
	// end is unknown.
	CommittedLag int64 `json:"committed_lag"`
	// LastStable is the log's last stable offset: the first record of the
	// oldest transaction still open, the high watermark when none is. -1
	// while unknown.
	LastStable int64 `json:"last_stable_offset"`
	// UnstableLag is the messages between the last stable offset and the
	// high watermark: what read_committed waits for a transaction still
	// open to end before it reads. -1 while unknown.
	UnstableLag int64  `json:"unstable_lag"`
	Error       string `json:"error,omitempty"`
	// Stalled says, when the partition has made no progress for longer
	// than the stall timeout, for how long and why.
	Stalled string `json:"stalled,omitempty"`
	// OldestUnsettled is the time of the oldest event fetched and not yet
	// settled (see entry.at); nil when none waits.
	OldestUnsettled *time.Time `json:"oldest_unsettled,omitempty"`
}

// Status is the consumer's view of its membership.
type Status struct {
	Joined     bool              `json:"joined"`
	Generation int32             `json:"generation"`
	Member     string            `json:"member,omitempty"`
	Partitions []PartitionStatus `json:"partitions"`
	LastError  string            `json:"last_error,omitempty"`
}

// Status returns the current membership and per-partition lag.
func (c *Consumer) Status() Status {
	floors, oldest := c.tracker.Floors(), c.tracker.Oldest()
	held := c.budget.Held()
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{Joined: c.gen != nil, Partitions: []PartitionStatus{}}
	if c.gen != nil {
		s.Generation, s.Member = c.gen.ID, c.gen.MemberID
	}
	if c.lastErr != nil {
		s.LastError = c.lastErr.Error()
	}
	for _, p := range c.parts {
		ps := PartitionStatus{Partition: p.id, Lag: p.lag.Load(), Committed: -1, CommittedLag: -1, LastStable: -1, UnstableLag: -1}
		if f, ok := floors[p.id]; ok {
			ps.Committed = f
		}
		hw, lso := p.hw.Load(), p.lso.Load()
		if hw >= 0 {
			from := ps.Committed
			if from < 0 {
				from = max(p.logStart.Load(), 0)
			}
			ps.CommittedLag = max(0, logEnd(!c.cfg.ReadUncommitted, hw, lso)-from)
			if lso >= 0 {
				ps.LastStable, ps.UnstableLag = lso, max(0, hw-lso)
			}
		}
		if e := p.lastErr.Load(); e != nil {
			ps.Error = *e
		}
		if at, ok := oldest[p.id]; ok {
			ps.OldestUnsettled = &at
		}
		if still := now.Sub(time.Unix(0, p.movedAt.Load())); still > c.cfg.StallTimeout {
			why := ps.Error
			if why == "" {
				why = fmt.Sprintf("nothing new fetched while %d bytes of the byte budget are held by events not yet settled (Bigtable or the dead-letter topic is behind)", held)
			}
			ps.Stalled = fmt.Sprintf("no progress for %s: %s", still.Round(time.Second), why)
		}
		s.Partitions = append(s.Partitions, ps)
	}
	return s
}

// Ready is the consumer's readiness: in the group, and no owned partition
// stalled (Problem).
func (c *Consumer) Ready() error {
	s := c.Status()
	if !s.Joined {
		if s.LastError != "" {
			return fmt.Errorf("not in the consumer group: %s", s.LastError)
		}
		return errors.New("not in the consumer group")
	}
	return c.Problem()
}

// Problem names the owned partitions that have made no progress for longer
// than the stall timeout, nil when none has.
func (c *Consumer) Problem() error {
	var errs []error
	for _, p := range c.Status().Partitions {
		if p.Stalled != "" {
			errs = append(errs, fmt.Errorf("partition %d of %s: %s", p.Partition, c.cfg.Topic, p.Stalled))
		}
	}
	return errors.Join(errs...)
}

// Committed returns the committed offset of each owned partition as this
// consumer knows it; after Close, as the final commit left them.
func (c *Consumer) Committed() map[int]int64 {
	c.mu.Lock()
	final := c.final
	c.mu.Unlock()
	if final != nil {
		return final
	}
	return c.tracker.Floors()
}
