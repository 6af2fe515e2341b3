package pipeline

import (
	"testing"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Every goroutine a test starts has ended when the package's tests end
// (testenv.Main stops the in-process Bigtable first).
func TestMain(m *testing.M) { testenv.Main(m) }
