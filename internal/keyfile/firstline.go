package keyfile

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
)

// FirstLine returns the first line of the secret file at path: a password
// or a token a mounted Secret gives, read again at each use so that a
// rotated file is taken without a restart. The file must be a regular one
// (a FIFO would block; a mounted Secret is a symlink to a regular file) of
// at most max bytes, and its first line must not be empty nor hold a
// control character. flag names the setting in errors, which never quote
// the content.
func FirstLine(path, flag string, max int64) (string, error) {
	if fi, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	} else if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s %s is not a regular file", flag, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if int64(len(data)) > max {
		// Cut short, a token or a password would be refused by the
		// broker in its own words, or worse, taken.
		return "", fmt.Errorf("%s %s is larger than %d bytes", flag, path, max)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	if line = strings.TrimSuffix(line, "\r"); line == "" {
		return "", fmt.Errorf("%s %s is empty", flag, path)
	}
	if strings.IndexFunc(line, unicode.IsControl) >= 0 {
		return "", fmt.Errorf("%s %s: the first line contains a control character", flag, path)
	}
	return line, nil
}
