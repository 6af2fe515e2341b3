package redrive

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
)

// checkpoint is how far an --apply run has come: the next offset of each
// partition, for one selection of letters.
type checkpoint struct {
	Filters string           `json:"filters"`
	Next    map[string]int64 `json:"next"`
}

// loadCheckpoint reads the checkpoint at path, empty when there is none;
// one written for other filters is an error.
func loadCheckpoint(path, filters string) (checkpoint, error) {
	cp := checkpoint{Filters: filters, Next: map[string]int64{}}
	if path == "" {
		return cp, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return cp, fmt.Errorf("read checkpoint: %w", err)
	}
	var read checkpoint
	if err := json.Unmarshal(data, &read); err != nil {
		return cp, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if read.Filters != filters {
		return cp, fmt.Errorf("checkpoint %s was written for other letters (%s), not these (%s): use another file", path, read.Filters, filters)
	}
	if read.Next != nil {
		cp.Next = read.Next
	}
	return cp, nil
}

// saveCheckpoint writes cp atomically (a new file renamed over the old).
func saveCheckpoint(path string, cp checkpoint) error {
	if path == "" {
		return nil
	}
	cp.Next = maps.Clone(cp.Next)
	data, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}
