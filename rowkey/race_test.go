//go:build race

package rowkey

// The race detector adds allocations of its own: allocation counts are
// checked in the ordinary build only.
const raceEnabled = true
