// Package sticky is the consumer group's balancer: it assigns partitions
// so that a rebalance moves as few as it can. Each member says, in its
// join, which partitions it owned and in which generation, and keeps them
// up to its fair share; only the partitions of members gone, and those
// beyond a share, move. So replacing one pod of a rolling deploy moves
// that pod's partitions alone, where kafka-go's range balancer orders
// members by their ids, which a new pod changes, and shifts partitions
// between pods that stay.
//
// This is the seam where kafka-go's gap shows (ingest/DESIGN.md, "The
// consumer group"): it speaks only the eager protocol, so every member
// still stops fetching at every rebalance, sticky or not; and it has no
// static membership, so a restarted pod is a new member, whose partitions
// the group gives back only once the old member's session ends or it
// leaves (a drain leaves at once).
package sticky

import (
	"encoding/binary"
	"slices"
	"sort"
	"sync"

	"github.com/segmentio/kafka-go"
)

// Balancer is a member's side of the protocol: what it claims at a join,
// and the assignment when it leads.
type Balancer struct {
	mu    sync.Mutex
	topic string
	gen   int32
	// owned are the partitions of the last generation, each with the
	// generation since which this member has owned it without a break.
	owned []held
}

// held is a partition owned since a generation.
type held struct {
	part  int
	since int32
}

// Protocol is the protocol name the members agree on. Members of a
// version without it offer range and round-robin only; the group then
// uses one of those until every member offers sticky.
const Protocol = "cellttl-sticky"

// ProtocolName is the name the group agrees on (kafka.GroupBalancer).
func (b *Balancer) ProtocolName() string { return Protocol }

// Remember records the partitions of topic a generation gave this member,
// for its next join: those it had in the generation before keep their
// since, the others are held since gen.
func (b *Balancer) Remember(gen int32, topic string, parts []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := make([]held, len(parts))
	for i, p := range parts {
		next[i] = held{part: p, since: gen}
		if j := slices.IndexFunc(b.owned, func(h held) bool { return h.part == p }); j >= 0 && b.topic == topic {
			next[i].since = b.owned[j].since
		}
	}
	b.gen, b.topic, b.owned = gen, topic, next
}

// claimVersion leads a member's user data, so that the encoding can change.
const claimVersion = 1

// UserData is the member's claim: a version byte, the generation, the
// topic, then each partition and the generation it is held since, as
// unsigned varints.
func (b *Balancer) UserData() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []byte{claimVersion}
	out = binary.AppendUvarint(out, uint64(max(b.gen, 0)))
	out = binary.AppendUvarint(out, uint64(len(b.topic)))
	out = append(out, b.topic...)
	out = binary.AppendUvarint(out, uint64(len(b.owned)))
	for _, h := range b.owned {
		out = binary.AppendUvarint(out, uint64(h.part))
		out = binary.AppendUvarint(out, uint64(max(h.since, 0)))
	}
	return out, nil
}

// claim is what a member said it owned.
type claim struct {
	gen   int64
	topic string
	parts []int
	since map[int]int64 // by partition
}

// parseClaim reads a member's user data; anything it cannot read (another
// version, another client) claims nothing.
func parseClaim(b []byte) claim {
	if len(b) == 0 || b[0] != claimVersion {
		return claim{}
	}
	b = b[1:]
	gen, k := binary.Uvarint(b)
	if k <= 0 {
		return claim{}
	}
	b = b[k:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return claim{}
	}
	c := claim{gen: int64(gen), topic: string(b[k : k+int(n)])}
	b = b[k+int(n):]
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)-k) {
		return claim{}
	}
	b = b[k:]
	c.since = make(map[int]int64, count)
	for range count {
		p, k := binary.Uvarint(b)
		if k <= 0 || p > 1<<31 {
			return claim{}
		}
		b = b[k:]
		since, k := binary.Uvarint(b)
		if k <= 0 || since > 1<<31 {
			return claim{}
		}
		c.parts, c.since[int(p)], b = append(c.parts, int(p)), int64(since), b[k:]
	}
	return c
}

// AssignGroups gives each topic's partitions to the members that read it,
// each keeping what it owned up to its share.
func (b *Balancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := kafka.GroupMemberAssignments{}
	byTopic := map[string][]int{}
	for _, p := range partitions {
		byTopic[p.Topic] = append(byTopic[p.Topic], p.ID)
	}
	claims := make(map[string]claim, len(members))
	for _, m := range members {
		out[m.ID] = map[string][]int{}
		claims[m.ID] = parseClaim(m.UserData)
	}
	for topic, ids := range byTopic {
		var readers []string
		for _, m := range members {
			if slices.Contains(m.Topics, topic) {
				readers = append(readers, m.ID)
			}
		}
		for member, parts := range assignSticky(topic, ids, readers, claims) {
			out[member][topic] = parts
		}
	}
	return out
}

// assignSticky shares ids among readers: n/len(readers) each, one more for
// the first n%len(readers). A partition two members claim is the later
// generation's. Members claiming more go first, so that the larger shares
// go where partitions already are; ties by member id, so that every
// leader computes the same assignment. A member over its share keeps the
// partitions it has held longest: in a rolling deploy the members that
// stay took the leaving pod's partitions one rebalance ago, and give those
// to its replacement, keeping their own.
func assignSticky(topic string, ids []int, readers []string, claims map[string]claim) map[string][]int {
	out := make(map[string][]int, len(readers))
	if len(readers) == 0 {
		return out
	}
	exists := make(map[int]bool, len(ids))
	for _, id := range ids {
		exists[id] = true
	}
	owner := map[int]string{}
	for _, m := range readers {
		c := claims[m]
		if c.topic != topic {
			continue
		}
		for _, p := range c.parts {
			if prev, taken := owner[p]; exists[p] && (!taken || claims[prev].gen < c.gen || claims[prev].gen == c.gen && m < prev) {
				owner[p] = m
			}
		}
	}
	mine := map[string][]int{}
	for p, m := range owner {
		mine[m] = append(mine[m], p)
	}
	order := slices.Clone(readers)
	sort.Slice(order, func(i, j int) bool {
		a, b := len(mine[order[i]]), len(mine[order[j]])
		return a > b || a == b && order[i] < order[j]
	})
	base, extra := len(ids)/len(order), len(ids)%len(order)
	quota := make(map[string]int, len(order))
	taken := make(map[int]bool, len(ids))
	for i, m := range order {
		quota[m] = base
		if i < extra {
			quota[m]++
		}
		kept, since := mine[m], claims[m].since
		sort.Slice(kept, func(i, j int) bool {
			a, b := since[kept[i]], since[kept[j]]
			return a < b || a == b && kept[i] < kept[j]
		})
		kept = kept[:min(len(kept), quota[m])]
		for _, p := range kept {
			taken[p] = true
		}
		out[m] = kept
	}
	free := slices.DeleteFunc(slices.Clone(ids), func(p int) bool { return taken[p] })
	slices.Sort(free)
	for _, m := range order {
		for len(out[m]) < quota[m] && len(free) > 0 {
			out[m], free = append(out[m], free[0]), free[1:]
		}
		slices.Sort(out[m])
	}
	return out
}
