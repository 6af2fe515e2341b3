//go:build skewclock

package main

import (
	"fmt"
	"os"
	"time"
)

// TESTENV_FORGET_CLOCK_SKEW moves the clock forget records by, in a build
// with the tag skewclock alone: the fault suite's schedules run forget as
// a host with a clock off Bigtable's would.
func init() {
	v := os.Getenv("TESTENV_FORGET_CLOCK_SKEW")
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "TESTENV_FORGET_CLOCK_SKEW=%q: %v\n", v, err)
		os.Exit(2)
	}
	wallClock = func() time.Time { return time.Now().Add(d) }
}
