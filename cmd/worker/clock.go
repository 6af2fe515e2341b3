package main

import "time"

// wallClock is the clock a command decides by: the records worker forget
// writes (erased_up_to, the journal row's key, the topics' keep), and a
// worker's events, letters and ledger (an event's expiry, a letter's
// placement, which records are in force). A build with the tag skewclock
// can move it (clock_skew.go), so that the fault suite runs forget and the
// workers on hosts whose clocks lie off Bigtable's and the brokers'; a
// release build has no such setting.
var wallClock = time.Now
