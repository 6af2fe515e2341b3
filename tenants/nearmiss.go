package tenants

import "sort"

// NearMiss returns the listed tenant an unlisted id lies within two edits
// of (insertions, deletions, substitutions), "" when none does: a misspelt
// tenant id, which an operator wants to see by name, rather than an id a
// producer chose (an email, a user id), which /status must not show. Of
// several, the nearest, then the first in order: never map order.
func (c *Config) NearMiss(id string) string {
	best, bestD := "", 3
	names := make([]string, 0, len(c.Policy.Tenants))
	for name := range c.Policy.Tenants {
		if d := len(name) - len(id); d <= 2 && d >= -2 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if d := editDistance(name, id, bestD); d < bestD {
			best, bestD = name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b in bytes, or bound
// when it is bound or more.
func editDistance(a, b string, bound int) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		low := cur[0]
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
			low = min(low, cur[j])
		}
		if low >= bound {
			return bound
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], bound)
}
