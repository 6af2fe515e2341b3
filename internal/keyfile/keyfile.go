// Package keyfile reads secret keys from a file, as a Kubernetes Secret
// mounts them: one key a line, in standard base64; blank lines and lines
// starting with # are skipped. Its errors name the file and the line,
// never what the line holds.
package keyfile

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/cellttl/cellttl/internal/bounded"
)

// MinBytes is the shortest key accepted: the 32 bytes of HMAC-SHA-256's
// security, as RFC 2104 advises.
const MinBytes = 32

// MaxFileBytes bounds a key file: hundreds of keys, in base64, one a line.
const MaxFileBytes = 64 << 10

// Read returns the keys of the file at path, in order, at least one. what
// names the file in errors ("letter key file").
func Read(path, what string) ([][]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s: not a regular file", what, path)
	}
	if err := private(fi); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	data, err := bounded.ReadFile(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(text)
		if err != nil {
			return nil, fmt.Errorf("%s %s, line %d: not standard base64", what, path, line)
		}
		if len(key) < MinBytes {
			return nil, fmt.Errorf("%s %s, line %d: a key of %d bytes, want at least %d (head -c 32 /dev/urandom | base64)", what, path, line, len(key), MinBytes)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s %s: no key", what, path)
	}
	return keys, nil
}

// private refuses a key file others may read or write, and one its group
// may when this process owns it: the group bit then lets only others in.
// A process that does not own the file reads it through its group, as a
// Kubernetes Secret mounted with defaultMode 0440 and the pod's fsGroup
// is read: that group is the pod's own.
func private(fi fs.FileInfo) error {
	perm := fi.Mode().Perm()
	owner := true
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = int(st.Uid) == os.Getuid()
	}
	switch {
	case perm&0o007 != 0:
		return fmt.Errorf("mode %04o lets others read or write it: chmod 600 it (or 400; a Kubernetes Secret: defaultMode 0440 with the pod's fsGroup)", perm)
	case owner && perm&0o070 != 0:
		return fmt.Errorf("mode %04o lets its group read or write it, and this process owns it: chmod 600 it (or 400)", perm)
	}
	return nil
}
