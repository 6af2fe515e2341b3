// Package retention changes the retention of data already written: it
// re-times a tenant's cells to the current tenants file (Retime), erases a
// user's rows (Forget), and checks every cell against the rule (Audit).
//
// It relies on two properties of cellttl's layout: the row key holds each
// event's base time to the millisecond (rowkey), and the rule is a pure
// function (expiry.Policy.Cell), so the correct timestamp of every cell
// under any policy is known exactly, without the event.
//
// A row's mutations are applied atomically by Bigtable, so a re-timed row
// never holds both its old and its new cells, nor neither.
package retention

import (
	"time"

	"github.com/cellttl/cellttl/internal/duration"
)

func fmtTTL(d time.Duration) string { return duration.Format(d) }
