package waitfor

import (
	"fmt"
	"time"

	"github.com/cellttl/cellttl/internal/envflag"
)

// Flag is the flag that sets Config.Timeout.
const Flag = "--service-timeout"

// Config is how long a command waits for one answer: its
// --service-timeout, whose default each command chooses.
type Config struct {
	Timeout time.Duration
}

// RegisterFlags declares --service-timeout, with the command's default.
func (c *Config) RegisterFlags(f *envflag.FlagSet, def time.Duration) {
	f.Section("Deadline")
	f.Duration(&c.Timeout, Flag[2:], envflag.Env, def, "the longest the command waits for an answer from Bigtable, Kafka or the schema registry, "+
		"the client's own retries included, before it stops with exit status 5, naming what it waited for (a scan that returns rows is answering; "+
		"a pause the command makes on purpose, between passes or to hold a rate, is no wait for an answer)")
}

// Validate checks the timeout, naming the flag.
func (c Config) Validate() error {
	if c.Timeout < time.Second {
		return fmt.Errorf("%s %s: must be at least 1s", Flag, c.Timeout)
	}
	return nil
}
