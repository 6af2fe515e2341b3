package sticky

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
)

// member is a group member reading clicks that owned parts in gen.
func member(id string, gen int32, parts ...int) kafka.GroupMember {
	b := &Balancer{}
	if parts != nil {
		b.Remember(gen, "clicks", parts)
	}
	data, _ := b.UserData()
	return kafka.GroupMember{ID: id, Topics: []string{"clicks"}, UserData: data}
}

func partitionsOf(n int) []kafka.Partition {
	out := make([]kafka.Partition, n)
	for i := range out {
		out[i] = kafka.Partition{Topic: "clicks", ID: i}
	}
	return out
}

// A rebalance moves only what it must: a pod replaced (a rolling deploy)
// gives its partitions to the new pod and no other moves; a pod added
// takes a fair share, one from each; a pod gone leaves its partitions to
// the others; a partition claimed twice is the later generation's; every
// partition is assigned once, shares differing by one at most.
func TestStickyBalancerMovesOnlyWhatItMust(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		members []kafka.GroupMember
		n       int
		want    map[string][]int
	}{
		{"replaced", []kafka.GroupMember{member("a", 3, 0, 1, 2, 3), member("b", 3, 4, 5, 6, 7), member("z", 0)}, 12,
			map[string][]int{"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}, "z": {8, 9, 10, 11}}},
		{"added", []kafka.GroupMember{member("a", 3, 0, 1, 2, 3, 4, 5), member("b", 3, 6, 7, 8, 9, 10, 11), member("c", 0)}, 12,
			map[string][]int{"a": {0, 1, 2, 3}, "b": {6, 7, 8, 9}, "c": {4, 5, 10, 11}}},
		{"gone", []kafka.GroupMember{member("a", 3, 0, 1, 2, 3), member("b", 3, 4, 5, 6, 7)}, 12,
			map[string][]int{"a": {0, 1, 2, 3, 8, 9}, "b": {4, 5, 6, 7, 10, 11}}},
		{"claimed twice", []kafka.GroupMember{member("a", 2, 0, 1, 2), member("b", 3, 2, 3)}, 4,
			map[string][]int{"a": {0, 1}, "b": {2, 3}}},
		{"all new", []kafka.GroupMember{member("b", 0), member("a", 0), member("c", 0)}, 5,
			map[string][]int{"a": {0, 1}, "b": {2, 3}, "c": {4}}},
		{"unreadable claim", []kafka.GroupMember{{ID: "a", Topics: []string{"clicks"}, UserData: []byte{9, 9}}, member("b", 1, 0, 1)}, 2,
			map[string][]int{"a": {1}, "b": {0}}}, // b keeps the first of its claim
	} {
		t.Run(c.name, func(t *testing.T) {
			got := (&Balancer{}).AssignGroups(c.members, partitionsOf(c.n))
			flat := map[string][]int{}
			seen := map[int]int{}
			for m, byTopic := range got {
				flat[m] = byTopic["clicks"]
				for _, p := range byTopic["clicks"] {
					seen[p]++
				}
			}
			if len(seen) != c.n || slices.ContainsFunc(slices.Collect(maps.Values(seen)), func(k int) bool { return k != 1 }) {
				t.Errorf("partitions assigned %v, want each of %d once", seen, c.n)
			}
			if fmt.Sprint(flat) != fmt.Sprint(c.want) {
				t.Errorf("assigned %v, want %v", flat, c.want)
			}
		})
	}
}

// A claim comes back from the user data the member joined with.
func TestStickyClaimEncoding(t *testing.T) {
	t.Parallel()
	b := &Balancer{}
	b.Remember(7, "clicks", []int{3, 1, 4})
	data, err := b.UserData()
	if c := parseClaim(data); err != nil || c.gen != 7 || c.topic != "clicks" || fmt.Sprint(c.parts) != "[3 1 4]" {
		t.Errorf("claim %+v, %v", c, err)
	}
	for _, bad := range [][]byte{nil, {2}, {1, 7}, {1, 7, 9, 'c'}, append(data[:len(data)-1:len(data)-1], 0xff)} {
		if c := parseClaim(bad); c.parts != nil || c.topic != "" {
			t.Errorf("parseClaim(%x) = %+v, want nothing", bad, c)
		}
	}
}

// A rolling deploy is two rebalances: a pod leaves (the others take its
// partitions), then its replacement joins. The members that stayed give
// the replacement what they took, and keep what they held before.
func TestStickyBalancerThroughARollingDeploy(t *testing.T) {
	t.Parallel()
	a, b := &Balancer{}, &Balancer{}
	a.Remember(1, "clicks", []int{0, 1})
	b.Remember(1, "clicks", []int{4, 5})
	join := func(id string, s *Balancer) kafka.GroupMember {
		data, _ := s.UserData()
		return kafka.GroupMember{ID: id, Topics: []string{"clicks"}, UserData: data}
	}
	// c (partitions 2, 3) has left.
	got := (&Balancer{}).AssignGroups([]kafka.GroupMember{join("a", a), join("b", b)}, partitionsOf(6))
	a.Remember(2, "clicks", got["a"]["clicks"])
	b.Remember(2, "clicks", got["b"]["clicks"])
	// Its replacement, z, joins.
	got = (&Balancer{}).AssignGroups([]kafka.GroupMember{join("a", a), join("b", b), join("z", &Balancer{})}, partitionsOf(6))
	if fmt.Sprint(got["a"]["clicks"], got["b"]["clicks"]) != "[0 1] [4 5]" || len(got["z"]["clicks"]) != 2 {
		t.Errorf("after the deploy a %v, b %v, z %v: want a and b to keep what they held", got["a"]["clicks"], got["b"]["clicks"], got["z"]["clicks"])
	}
}
