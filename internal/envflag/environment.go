package envflag

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

func (f *FlagSet) lookupLegacy(m *meta) (string, bool) {
	if m.legacy == "" {
		return "", false
	}
	return os.LookupEnv(m.legacy)
}

// unknownVariables is the error for the prefixed variables that name no
// flag, each with the nearest variable that does.
func (f *FlagSet) unknownVariables() error {
	if !f.prefixed {
		return nil
	}
	known := map[string]bool{}
	for _, v := range f.Variables() {
		known[v] = true
	}
	var errs []error
	others := false // the other commands' variables are in known
	for _, kv := range os.Environ() {
		env, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(env, Prefix) || known[env] || serviceLink.MatchString(env) {
			continue
		}
		if f.known != nil && !others {
			// Asked only for a variable that is not the set's own: the
			// other commands' flag sets are made to answer.
			for _, v := range f.known() {
				known[v] = true
			}
			if others = true; known[env] {
				continue
			}
		}
		err := fmt.Errorf("environment variable %s names no flag", env)
		if near := nearest(env, known); near != "" {
			err = fmt.Errorf("%w (did you mean %s?)", err, near)
		}
		errs = append(errs, err)
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// serviceLink matches the variables Kubernetes gives a pod for each
// Service of its namespace (a Service named cellttl-metrics gives
// CELLTTL_METRICS_SERVICE_HOST, CELLTTL_METRICS_PORT_8080_TCP_ADDR...):
// not the operator's words, and no flag's name ends so.
var serviceLink = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)?)$`)

// nearest is the name of names closest to s by edit distance, if it is
// close enough to be a misspelling.
func nearest(s string, names map[string]bool) string {
	best, bestD := "", 4
	for n := range names {
		if d := distance(s, n); d < bestD || (d == bestD && n < best) {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Variables lists the variables the set's flags read, legacy ones
// included.
func (f *FlagSet) Variables() []string {
	var vs []string
	for _, m := range f.meta {
		if m.env != "" {
			vs = append(vs, m.env)
		}
		if m.legacy != "" {
			vs = append(vs, m.legacy)
		}
	}
	slices.Sort(vs)
	return vs
}
