package deploy

import (
	"testing"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Every goroutine a test starts has ended when the package's tests end,
// and the in-process services the tests shared are stopped.
func TestMain(m *testing.M) { testenv.Main(m) }
