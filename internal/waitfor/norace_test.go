//go:build !race

package waitfor

const raceEnabled = false
