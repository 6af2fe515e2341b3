// Package release names this build of cellttl and orders releases: the
// version a binary reports, and the rule by which a table set up by one
// release refuses writers too old for it.
package release

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is the version of this tree. At a release it is
// MAJOR.MINOR.PATCH, and the CHANGELOG section of that name is dated:
// that one commit is the release. The next commit opens the next version
// as MAJOR.MINOR.PATCH-dev, so no two builds of different sources answer
// the same release. TestVersionNamesOneBuild holds both rules.
const Version = "0.2.3-dev"

// OldestWriter is the oldest release that writes a table the way this one
// reads it: `worker setup` records it in the table (tablemeta), and a
// writer of an older release refuses to start there. It moves up only
// when a release changes what is written (a row, a cell, a column an
// older release would write wrongly or not at all); the CHANGELOG's
// rollback note of that release says so. It is always a release, never a
// -dev version.
const OldestWriter = "0.1.0"

// Core is v without its pre-release part: the release a -dev build is
// the making of. A writer is judged by it (tablemeta.CheckWriter): a
// build of 0.3.0-dev writes the table as 0.3.0 will, and may record
// 0.3.0 as the oldest writer.
func Core(v string) string {
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	return core
}

// Compare orders two versions by semantic-versioning precedence: -1, 0 or
// +1 as a is older than, the same as or newer than b. A pre-release comes
// before its release (0.2.3-dev < 0.2.3). A version it cannot read is an
// error: a table's record is input.
func Compare(a, b string) (int, error) {
	ca, pa, err := split(a)
	if err != nil {
		return 0, err
	}
	cb, pb, err := split(b)
	if err != nil {
		return 0, err
	}
	for i := range ca {
		switch {
		case ca[i] < cb[i]:
			return -1, nil
		case ca[i] > cb[i]:
			return 1, nil
		}
	}
	return comparePre(pa, pb), nil
}

// Parse reads a release, MAJOR.MINOR.PATCH (a leading v allowed), each
// below 1000. A pre-release is refused: what a table records, and what
// orders its cells, is a release.
func Parse(v string) ([3]int, error) {
	core, pre, err := split(v)
	if err == nil && pre != "" {
		err = fmt.Errorf("release %q: a pre-release, not a release", v)
	}
	return core, err
}

// split reads MAJOR.MINOR.PATCH[-PRE]: PRE is dot-separated identifiers
// of letters, digits and hyphens, as semantic versioning has them (build
// metadata, +..., is not used here and refused).
func split(v string) (core [3]int, pre string, err error) {
	s := strings.TrimPrefix(v, "v")
	s, pre, hasPre := strings.Cut(s, "-")
	if hasPre {
		for _, id := range strings.Split(pre, ".") {
			if id == "" || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "" {
				return core, "", fmt.Errorf("release %q: pre-release %q is not dot-separated letters, digits and hyphens", v, pre)
			}
		}
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return core, "", fmt.Errorf("release %q: want MAJOR.MINOR.PATCH", v)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n >= 1000 || p != strconv.Itoa(n) {
			return core, "", fmt.Errorf("release %q: %q is not a version number below 1000", v, p)
		}
		core[i] = n
	}
	return core, pre, nil
}

// comparePre orders pre-release parts as semantic versioning does: none
// is newest; identifiers compare in turn, numbers numerically and below
// words; a longer list wins a tie.
func comparePre(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return 1
	case b == "":
		return -1
	}
	ia, ib := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(ia) && i < len(ib); i++ {
		na, errA := strconv.Atoi(ia[i])
		nb, errB := strconv.Atoi(ib[i])
		switch {
		case errA == nil && errB == nil && na != nb:
			return cmpInt(na, nb)
		case errA == nil && errB != nil:
			return -1
		case errA != nil && errB == nil:
			return 1
		case errA != nil && ia[i] != ib[i]:
			return strings.Compare(ia[i], ib[i])
		}
	}
	return cmpInt(len(ia), len(ib))
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
