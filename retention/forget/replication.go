package forget

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
)

// Replication is how forget accounts for a replicated instance. Under an
// app profile with multi-cluster routing, forget's writes land in one
// cluster and reach the others later (seconds, or as long as a cluster is
// cut off), and so do the workers':
//
//   - a worker reading the ledger through another cluster does not see the
//     record yet: the workers' bound counts from when it has reached every
//     cluster, not from when forget wrote it;
//   - a row a worker wrote through another cluster before its bound may
//     not have reached forget's cluster when the second pass reads it, and
//     would survive it;
//   - a deleted row stays readable through another cluster until the
//     deletion reaches it.
//
// So forget waits for consistency (Wait) where it may: both tables before
// counting (which also proves it may, before anything is recorded), the
// ledger after recording, and the table before the second pass and after
// it. Without Wait, Statement says why no wait is needed.
type Replication struct {
	// Wait returns once every write to table that finished before the
	// call has reached every cluster of the instance
	// (AdminClient.WaitForReplication: a consistency token, then
	// CheckConsistency until it holds); a single cluster is consistent at
	// once.
	Wait func(ctx context.Context, table string) error
	// Table is the events' table (the ledger's is the Store's).
	Table string
	// Statement is, without Wait, why forget does not wait: what the
	// receipt says.
	Statement string
}

// ReplicationReceipt says what forget did about replication.
type ReplicationReceipt struct {
	// Waited is set when forget waited for consistency.
	Waited bool `json:"waited"`
	// Summary says it in words: what was waited for and how long, or why
	// nothing was.
	Summary string `json:"summary"`
	// Longest is the longest wait.
	Longest string `json:"longest_wait,omitempty"`

	waits   int
	longest time.Duration
}

// slowReplication is how long a wait for replication goes before forget
// says it is still waiting.
const slowReplication = 30 * time.Second

// replicated waits until the writes to table have reached every cluster,
// when forget waits; why says what for, in the log.
func (e *eraser) replicated(ctx context.Context, table, why string) error {
	rp := e.r.Replication
	if rp.Wait == nil {
		return nil
	}
	start := time.Now()
	// A cluster cut off keeps forget waiting as long: say so meanwhile.
	slow := time.AfterFunc(slowReplication, func() {
		e.log.Warn("still waiting for the writes to reach every cluster of the instance (a cluster cut off, or replication behind?)", "table", table, "for", why, "waited", slowReplication)
	})
	err := rp.Wait(ctx, table)
	slow.Stop()
	if err != nil {
		return fmt.Errorf("wait for the writes to %s to reach every cluster (%s): %w", table, why, err)
	}
	took := time.Since(start)
	rc := &e.rc.Replication
	rc.waits++
	if took > rc.longest {
		rc.longest = took
		rc.Longest = took.Round(time.Millisecond).String()
	}
	if took > time.Second {
		e.log.Info("waited for replication", "table", table, "for", why, "took", took.Round(time.Millisecond))
	}
	return nil
}

// probeReplication, before anything is counted or recorded, waits for
// both tables: the counts then see the rows written through every cluster,
// and a forget without the right to wait stops before it records.
func (e *eraser) probeReplication(ctx context.Context) error {
	rp := e.r.Replication
	if rp.Wait == nil {
		e.rc.Replication.Summary = rp.Statement
		return nil
	}
	for _, table := range []string{rp.Table, e.store.Table()} {
		if err := e.replicated(ctx, table, "before counting"); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w; nothing was recorded or deleted", err)
			}
			return fmt.Errorf("%w; nothing was recorded or deleted. Grant forget bigtable.tables.generateConsistencyToken and bigtable.tables.checkConsistency on both tables, or, when forget and every worker route to one cluster, run it with --replication single-cluster", err)
		}
	}
	return nil
}

// replicationSummary fills the receipt's words once forget has done.
func (e *eraser) replicationSummary() {
	rc := &e.rc.Replication
	if e.r.Replication.Wait == nil {
		return
	}
	rc.Waited = true
	switch {
	case e.r.DryRun:
		rc.Summary = "waited for consistency before counting (a run waits again after recording and around the second pass)"
	case e.recorded() == 0:
		rc.Summary = "waited for consistency before counting; nothing recorded, nothing more to wait for"
	default:
		rc.Summary = fmt.Sprintf("waited for consistency (%d waits): both tables before counting, the ledger after recording, so that a worker reading through any cluster sees the records before the bound counts, and the table before the second pass and after it, so that it deletes the rows written through every cluster and the deletions reach them all", rc.waits)
	}
}

// SingleCluster checks, as far as it can, the operator's statement that
// forget and every worker route to one cluster, and returns what the
// receipt says. ap is forget's app profile (name, "" for the instance's
// default), as read with bigtable.appProfiles.get, or readErr why it could
// not be read; the workers' profiles it cannot see. A profile that routes
// to any of several clusters is refused: forget would have to wait.
func SingleCluster(name string, ap *adminpb.AppProfile, readErr error, log *slog.Logger) (string, error) {
	if name == "" {
		name = "default"
	}
	if readErr != nil {
		log.Warn("forget's app profile could not be read: --replication single-cluster is taken on trust", "app_profile", name, "err", readErr)
		return fmt.Sprintf("not checked: --replication single-cluster states that forget and every worker route to one cluster; forget's app profile %s could not be read (%v)", name, readErr), nil
	}
	if s := ap.GetSingleClusterRouting(); s != nil {
		return fmt.Sprintf("single-cluster profile: forget's app profile %s routes to cluster %s; the workers' must route there too (not checked)", name, s.GetClusterId()), nil
	}
	if m := ap.GetMultiClusterRoutingUseAny(); m != nil && len(m.GetClusterIds()) == 1 {
		return fmt.Sprintf("single-cluster profile: forget's app profile %s routes to cluster %s alone; the workers' must route there too (not checked)", name, m.GetClusterIds()[0]), nil
	}
	return "", fmt.Errorf("--replication single-cluster: forget's app profile %s routes to any of several clusters, where the ledger record and the deletions reach the others later; run forget with --replication wait, or with a profile of single-cluster routing", name)
}
