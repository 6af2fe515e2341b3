package verify

import (
	"log/slog"
	"testing"

	"github.com/cellttl/cellttl/testkit/testenv"
)

var quietLog = slog.New(slog.DiscardHandler)

func TestMain(m *testing.M) { testenv.Main(m) }
