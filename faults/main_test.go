package faults

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Every goroutine a scenario starts has ended when the suite ends, except
// Toxiproxy's own: a stopped proxy leaves the pipe of a link whose client
// already went blocked on a channel nobody reads (a test tool, not the
// worker).
func TestMain(m *testing.M) {
	testenv.Main(m, goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"))
}
