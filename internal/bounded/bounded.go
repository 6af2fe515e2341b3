// Package bounded cuts text that comes from outside (a registry's error, a
// schema quoted by a compiler, a producer's value in a reason) to a known
// size wherever it lands: a dead letter's header, a log line, /readyz,
// /status. One cut, with its bound said at each place that uses it, so
// that no copy grows with what an outside party chooses to send.
package bounded

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"
)

// The bounds of the places outside text lands, in bytes.
const (
	// Reason bounds a dead letter's reason: so that no letter outgrows
	// its topic's max.message.bytes for what it says.
	Reason = 2 << 10
	// Answer bounds what a service answered (a registry's error, a
	// compiler's complaint about a schema) in an error, a log line,
	// /readyz and /status.
	Answer = 1 << 10
)

// Text is s cut to at most max bytes, at a rune boundary, saying how much
// was cut; s itself when it fits.
func Text(s string, max int) string {
	if len(s) <= max {
		return s
	}
	note := " … (" + strconv.Itoa(len(s)) + " bytes, cut)"
	keep := max - len(note)
	if keep < 0 {
		keep, note = max, ""
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + note
}

// ReadFile reads the file at path, refusing one past max bytes before
// holding more than max+1 of it: a file is outside input too, whoever
// writes it (a ConfigMap, a mounted Secret, a typo in a path naming a
// disk image).
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return data, nil
}
