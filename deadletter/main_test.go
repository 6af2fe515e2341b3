package deadletter

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts has ended when the package's tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
