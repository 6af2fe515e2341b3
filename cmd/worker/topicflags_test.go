package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The commands that register a part of the worker's flags check that
// part as the worker does: a negative --max-clock-skew would make forget
// and offboard erase less than asked, a negative --dlq-unlisted-retention
// would make the statement promise a shorter keep than the workers give.
func TestTopicFlagsAreCheckedWhereRegistered(t *testing.T) {
	t.Parallel()
	for args, want := range map[*[]string]string{
		{"forget", "--tenant", "acme", "--user", "u1", "--requested-by", "t", "--brokers", "b:1", "--max-clock-skew", "-1h"}: "--max-clock-skew -1h0m0s: must not be negative",
		{"offboard", "--tenant", "acme", "--requested-by", "t", "--brokers", "b:1", "--max-clock-skew", "-1h"}:               "--max-clock-skew -1h0m0s: must not be negative",
		{"retention", "--brokers", "b:1", "--max-clock-skew", "-1h"}:                                                         "--max-clock-skew -1h0m0s: must not be negative",
		{"retention", "--brokers", "b:1", "--dlq-unlisted-retention", "-1h"}:                                                 "--dlq-unlisted-retention -1h0m0s: must not be negative",
		{"retention", "--brokers", "b:1", "--ttl-from", "nowhere"}:                                                           "--ttl-from",
		{"retention", "--brokers", "b:1", "--dlq-topic", "clicks"}:                                                           `--dlq-topic "clicks" is the input topic`,
	} {
		var out bytes.Buffer
		err := run(context.Background(), *args, &out, &out)
		if code := exitCode(err, &out); code != 2 || !strings.Contains(out.String(), want) {
			t.Errorf("%v: exit %d, %v\n%s\nwant exit 2 and %q", *args, code, err, out.String(), want)
		}
	}
}
