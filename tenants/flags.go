package tenants

import (
	"fmt"
	"time"

	"github.com/cellttl/cellttl/internal/envflag"
)

// FileConfig is where the tenants config is read from and, for a running
// worker, how often it is read again.
type FileConfig struct {
	Path           string
	ReloadInterval time.Duration
}

// DefaultFileConfig returns the defaults the flags document.
func DefaultFileConfig() FileConfig {
	return FileConfig{Path: "tenants.yaml", ReloadInterval: 5 * time.Second}
}

// RegisterFlags declares --tenants, which every command that reads the
// file takes.
func (c *FileConfig) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Tenants")
	f.String(&c.Path, "tenants", "TENANTS_FILE", c.Path, "per-tenant TTL file, or a directory of *.yaml files read as one (the top-level keys in one file, each tenant in one)")
}

// RegisterReloadFlags declares the flags of a worker that reloads the file.
func (c *FileConfig) RegisterReloadFlags(f *envflag.FlagSet) {
	f.Section("Tenants")
	f.Advanced()
	f.Duration(&c.ReloadInterval, "tenants-reload-interval", "TENANTS_RELOAD_INTERVAL", c.ReloadInterval, "how often the tenants file is checked for changes (SIGHUP checks at once)")
}

// Validate checks the settings, naming the flag at fault.
func (c FileConfig) Validate() error {
	if c.ReloadInterval <= 0 {
		return fmt.Errorf("--tenants-reload-interval %s: must be positive", c.ReloadInterval)
	}
	return nil
}
