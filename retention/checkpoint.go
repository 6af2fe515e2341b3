package retention

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// doneMark records a tenant whose rows are all done.
const doneMark = "\xff(done)"

// checkpoint is the last row done per tenant, kept in a file so that an
// interrupted run resumes after it. It is written whole to a temporary
// file and renamed over the old one: a crash leaves the old or the new.
type checkpoint struct {
	path string
	Done map[string]string `json:"done"` // tenant -> last key done, or doneMark
}

// load reads the checkpoint; a missing file is an empty checkpoint (the
// first run of a job that always passes --resume), and ok says which.
func (c *checkpoint) load() (ok bool, err error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, c); err != nil {
		return false, fmt.Errorf("checkpoint %s: %w", c.path, err)
	}
	if c.Done == nil {
		c.Done = map[string]string{}
	}
	return true, nil
}

func (c *checkpoint) reset() { c.Done = map[string]string{} }

func (c *checkpoint) save(tenant, last string) error {
	c.Done[tenant] = last
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
