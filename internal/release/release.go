// Package release names this release of cellttl: the version a binary
// reports.
package release

// Version is this release's semantic version, MAJOR.MINOR.PATCH. It
// changes with a CHANGELOG section of the same name, which says how to
// upgrade to it and how to roll back from it; a release is the commit
// tagged v<Version>.
const Version = "0.1.0"
