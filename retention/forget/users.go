package forget

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cellttl/cellttl/rowkey"
)

// Users gathers the users to erase, each once: the ids given one by one
// (--user) and those of a file (--users-from, "" for none), each checked as
// row keys hold ids. Errors name the flag and the line, never the id: they
// reach logs.
func Users(given []string, file string) ([]string, error) {
	var errs []error
	users := append([]string(nil), given...)
	for i, u := range given {
		if p := rowkey.IDProblem(u); p != "" {
			errs = append(errs, fmt.Errorf("--user number %d: the user id %s", i+1, p))
		}
	}
	if file != "" {
		fromFile, err := readUsers(file)
		if err != nil {
			errs = append(errs, err)
		}
		users = append(users, fromFile...)
	}
	if len(users) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("--user or --users-from is required"))
	}
	seen := map[string]bool{}
	out := users[:0]
	for _, u := range users {
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out, errors.Join(errs...)
}

// readUsers reads a --users-from file: one id per line, exactly as given
// (only the line end is taken off: ids may hold spaces); blank lines and
// lines starting with # are skipped.
func readUsers(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--users-from: %w", err)
	}
	defer f.Close()
	var users []string
	var errs []error
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if n == 1 {
			line = strings.TrimPrefix(line, "\ufeff") // a byte order mark, not part of the id
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if p := rowkey.IDProblem(line); p != "" {
			errs = append(errs, fmt.Errorf("--users-from %s line %d: the user id %s", path, n, p))
			continue
		}
		users = append(users, line)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("--users-from %s: %w", path, err))
	}
	return users, errors.Join(errs...)
}
