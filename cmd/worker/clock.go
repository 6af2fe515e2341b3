package main

import "time"

// wallClock is the clock worker forget records by: erased_up_to, the
// journal row's key, the topics' keep. A build with the tag skewclock can
// move it (clock_skew.go), so that the fault suite runs forget on a host
// whose clock lies off Bigtable's; a release build has no such setting.
var wallClock = time.Now
