//go:build !race

package rowkey

const raceEnabled = false
