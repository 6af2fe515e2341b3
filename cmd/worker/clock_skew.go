//go:build skewclock

package main

import (
	"fmt"
	"os"
	"time"
)

// TESTENV_CLOCK_SKEW moves the clock the command decides by (wallClock),
// in a build with the tag skewclock alone: the fault suite's schedules run
// forget and the workers as hosts with clocks off Bigtable's and the
// brokers' would.
func init() {
	v := os.Getenv("TESTENV_CLOCK_SKEW")
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "TESTENV_CLOCK_SKEW=%q: %v\n", v, err)
		os.Exit(2)
	}
	wallClock = func() time.Time { return time.Now().Add(d) }
}
