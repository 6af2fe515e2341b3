package event

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every goroutine a test starts has ended when the package's tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Decode decodes a record with this value and record timestamp, and no key
// or headers: the contract's tests need no more.
func (d Decoder) Decode(value []byte, recordTime time.Time) (Event, error) {
	return d.DecodeRecord(&Source{Value: value, Time: recordTime})
}
