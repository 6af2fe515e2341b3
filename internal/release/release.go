// Package release names this release of cellttl and orders releases: the
// version a binary reports, and the rule by which a table set up by one
// release refuses writers too old for it.
package release

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is this release's semantic version, MAJOR.MINOR.PATCH. It
// changes with a CHANGELOG section of the same name, which says how to
// upgrade to it and how to roll back from it; a release is the commit
// tagged v<Version>.
const Version = "0.2.2"

// OldestWriter is the oldest release that writes a table the way this one
// reads it: `worker setup` records it in the table (tablemeta), and a
// writer of an older release refuses to start there. It moves up only
// when a release changes what is written (a row, a cell, a column an
// older release would write wrongly or not at all); the CHANGELOG's
// rollback note of that release says so.
const OldestWriter = "0.1.0"

// Compare orders two versions: -1, 0 or +1 as a is older than, the same as
// or newer than b. A version it cannot read is an error: a table's record
// is input.
func Compare(a, b string) (int, error) {
	pa, err := Parse(a)
	if err != nil {
		return 0, err
	}
	pb, err := Parse(b)
	if err != nil {
		return 0, err
	}
	for i := range pa {
		switch {
		case pa[i] < pb[i]:
			return -1, nil
		case pa[i] > pb[i]:
			return 1, nil
		}
	}
	return 0, nil
}

// Parse reads MAJOR.MINOR.PATCH (a leading v allowed), each below 1000.
func Parse(v string) ([3]int, error) {
	var out [3]int
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 {
		return out, fmt.Errorf("release %q: want MAJOR.MINOR.PATCH", v)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n >= 1000 || p != strconv.Itoa(n) {
			return out, fmt.Errorf("release %q: %q is not a version number below 1000", v, p)
		}
		out[i] = n
	}
	return out, nil
}
