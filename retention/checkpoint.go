package retention

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cellttl/cellttl/rowkey"
)

// doneMark records a tenant whose rows are all done.
const doneMark = "\xff(done)"

// checkpoint is where a run stands: the pass under way, the rows it changed
// so far, and the last row done per tenant, kept in a file so that an
// interrupted run resumes there. It is written whole to a temporary file
// and renamed over the old one: a crash leaves the old or the new.
type checkpoint struct {
	path string
	// For is the job the checkpoint belongs to: resuming another job from
	// it would skip rows that job never visited.
	For Job `json:"for"`
	// Pass is the pass under way (or last finished), from 1; Changed is the
	// rows it changed so far, across interruptions: a pass that changed
	// rows is followed by another, however often it was resumed.
	Pass    int   `json:"pass"`
	Changed int64 `json:"changed"`
	// Ended is when the last pass ended, zero while one is under way: the
	// delay before the next runs from there, also after an interruption.
	Ended time.Time `json:"ended,omitzero"`
	// Done maps a tenant to the position reached (rowkey.Position: the
	// tenant and hash bucket, no ids), or doneMark.
	Done map[string]string `json:"done"`
}

// Job identifies what a checkpoint records: the table and family, the
// tenants (none: the whole table), the shard, the tenants file the rows are
// re-timed to, and, for a migration, its step.
type Job struct {
	Table   string   `json:"table"`
	Family  string   `json:"family"`
	Tenants []string `json:"tenants"`
	Shard   string   `json:"shard"`
	Config  string   `json:"config_version"`
	Step    string   `json:"step,omitempty"`
}

func (j Job) String() string {
	tenants := "every tenant"
	if len(j.Tenants) > 0 {
		tenants = "tenants " + strings.Join(j.Tenants, ",")
	}
	s := fmt.Sprintf("table %s family %s, %s, shard %s, tenants file version %s", j.Table, j.Family, tenants, j.Shard, j.Config)
	if j.Step != "" {
		s += ", " + j.Step
	}
	return s
}

func (j Job) equal(o Job) bool {
	return j.Table == o.Table && j.Family == o.Family && slices.Equal(j.Tenants, o.Tenants) && j.Shard == o.Shard && j.Config == o.Config && j.Step == o.Step
}

// errOtherStep is a checkpoint of another step of the same migration.
var errOtherStep = errors.New("checkpoint of another step")

// load reads the checkpoint of job; a missing file is an empty checkpoint
// (the first run of a job that always passes --resume), and ok says which.
// A checkpoint of another job is refused: resuming from it would skip rows
// this one never visited. One of another step of the same migration is
// errOtherStep: that step is over, this one starts from its first row.
func (c *checkpoint) load(job Job) (ok bool, err error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read checkpoint: %w", err)
	}
	var read checkpoint
	if err := json.Unmarshal(b, &read); err != nil {
		return false, fmt.Errorf("checkpoint %s: %w", c.path, err)
	}
	if !read.For.equal(job) {
		other := read.For
		other.Step = job.Step
		if job.Step != "" && other.equal(job) {
			return false, errOtherStep
		}
		return false, fmt.Errorf("checkpoint %s was written for %s, not for this run's %s: give this run a --checkpoint of its own, or delete the file to start over", c.path, read.For, job)
	}
	c.For, c.Pass, c.Changed, c.Ended, c.Done = read.For, read.Pass, read.Changed, read.Ended, read.Done
	if c.Done == nil {
		c.Done = map[string]string{}
	}
	return true, nil
}

// start begins pass.
func (c *checkpoint) start(pass int) error {
	c.Pass, c.Changed, c.Ended, c.Done = pass, 0, time.Time{}, map[string]string{}
	return c.write()
}

// save records the last row done of a tenant, and the rows the pass
// changed so far.
func (c *checkpoint) save(tenant, last string, changed int64) error {
	c.Done[tenant], c.Changed = last, changed
	return c.write()
}

// count records the rows the pass changed so far.
func (c *checkpoint) count(changed int64) error {
	if changed == c.Changed {
		return nil
	}
	c.Changed = changed
	return c.write()
}

// end records the end of the pass.
func (c *checkpoint) end(at time.Time) error {
	c.Ended = at
	return c.write()
}

func (c *checkpoint) write() error {
	if c.path == "" {
		return nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".checkpoint-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if _, err = tmp.Write(b); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint %s: %w", c.path, err)
	}
	return nil
}

// CheckpointHoldsIDs reports whether the checkpoint at path holds row keys
// (ids that live no TTL) rather than positions: a checkpoint written before
// positions replaced keys, for a tenant no run has passed since.
func CheckpointHoldsIDs(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("read checkpoint: %w", err)
	}
	var read checkpoint
	if err := json.Unmarshal(b, &read); err != nil {
		return false, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	for _, at := range read.Done {
		if at != doneMark && rowkey.Position(at) != at {
			return true, nil
		}
	}
	return false, nil
}
