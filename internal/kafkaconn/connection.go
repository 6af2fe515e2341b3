package kafkaconn

import (
	"errors"
	"sort"
	"strings"

	"github.com/cellttl/cellttl/internal/envflag"
)

// Connection is the input topic and how to reach its brokers, as the
// worker's flags give it: part of ingest.Config, and all the commands
// that read Kafka without consuming as a group member (forget, offboard,
// retention, redrive) take of those flags.
type Connection struct {
	Brokers  Brokers
	Topic    string
	Security Security
}

// Input is the input topic, for the reads of its offsets and id.
func (c Connection) Input() Topic {
	return Topic{Brokers: c.Brokers, Security: c.Security, Name: c.Topic}
}

// RegisterFlags declares where the input topic is and how to connect.
func (c *Connection) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Kafka")
	f.Value(&c.Brokers, "brokers", "KAFKA_BROKERS", "comma-separated Kafka bootstrap brokers (required)")
	f.String(&c.Topic, "topic", "KAFKA_TOPIC", c.Topic, "topic of click events")
	c.Security.RegisterFlags(f)
}

// Validate checks the connection, naming the flag at fault.
func (c Connection) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no Kafka brokers given (--brokers or CELLTTL_BROKERS)"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("--topic must not be empty"))
	}
	errs = append(errs, c.Security.Validate())
	return errors.Join(errs...)
}

// Brokers is a broker list, given as comma-separated addresses.
type Brokers []string

func (b *Brokers) String() string { return strings.Join(*b, ",") }

// Set parses a comma-separated list; blanks between commas are ignored.
func (b *Brokers) Set(s string) error {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	*b = out
	return nil
}
