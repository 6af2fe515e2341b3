package verify

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

var quietLog = slog.New(slog.DiscardHandler)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
