package retention

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cellttl/cellttl/rowkey"
)

// Shard is one of Count parts of the work, Index from 0: N processes, each
// given its own Index (a Kubernetes Indexed Job's completion index), share
// it without overlap.
type Shard struct{ Index, Count int }

// All is the whole of the work.
var All = Shard{Index: 0, Count: 1}

// ParseShard reads "I/N", I from 0 to N-1.
func ParseShard(s string) (Shard, error) {
	i, n, ok := strings.Cut(s, "/")
	idx, err1 := strconv.Atoi(i)
	cnt, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || cnt < 1 || idx < 0 || idx >= cnt {
		return Shard{}, fmt.Errorf("--shard %q: want I/N with 0 <= I < N, such as 0/4", s)
	}
	return Shard{Index: idx, Count: cnt}, nil
}

func (s Shard) String() string {
	if s.Count == 0 {
		s = All
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Set reads "I/N", as a flag.
func (s *Shard) Set(v string) error {
	p, err := ParseShard(v)
	if err != nil {
		return err
	}
	*s = p
	return nil
}

// buckets is the number of hash buckets after a tenant in a row key.
const buckets = 1 << 16

// tenantRange is the shard's part of a tenant's rows. A tenant's rows are
// spread evenly over 65,536 hash buckets (rowkey), and so are the tablets
// Bigtable splits them into: the shard takes an equal run of buckets. The
// split depends on nothing but the key layout, so every process computes
// the same one, however the tablets split or merge while they run.
//
// Splitting at the tablet boundaries SampleRowKeys reports instead would
// need every process to see the same boundaries: they move as tablets
// split and merge, and the emulator draws them at random on every call
// (tried: three shards of a 2,000-row table counted 2,526 rows).
func (s Shard) tenantRange(tenant string) (start, end string) {
	if s.Count <= 1 {
		p := rowkey.TenantPrefix(tenant)
		return p, rowkey.PrefixEnd(p)
	}
	prefix := rowkey.TenantPrefix(tenant)
	lo, hi := s.Index*buckets/s.Count, (s.Index+1)*buckets/s.Count
	start = prefix
	if lo > 0 {
		start = fmt.Sprintf("%s%04x", prefix, lo)
	}
	end = rowkey.PrefixEnd(prefix)
	if hi < buckets {
		end = fmt.Sprintf("%s%04x", prefix, hi)
	}
	return start, end
}

// progress is how far through the shard's buckets of a tenant key is.
func (s Shard) progress(key, tenant string) float64 {
	f := fraction(key, tenant)*float64(s.Count) - float64(s.Index)
	return min(1, max(0, f))
}
