package deadletter

import (
	"testing"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Every goroutine a test starts has ended when the package's tests end.
func TestMain(m *testing.M) { testenv.Main(m) }
