package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// worker retention reads the live system: on a clean setup (the input
// topic keeping records less than the shortest TTL and bounding record
// timestamps, the dead-letter topic finite, the GC rule the file's) it
// reports no breach and exits 0; with one breach planted in each store it
// can see, it names each one and exits 1.
func TestRetentionStatement(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the topic settings the retention statement reads")
	testenv.NeedsBroker(t, "message.timestamp.after.max.ms and the retention check the statement reads")
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n  globex: {ttl: 3d, min_ttl: 2h}\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	brokers := []string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic}
	testenv.AlterTopic(t, e.brokers, e.topic, map[string]string{"retention.ms": "1800000", "segment.ms": "300000", "message.timestamp.after.max.ms": "300000"})
	// A class the worker has not created yet is no breach, nor a checkpoint
	// of positions; one holding a row key (written before) is.
	dir := t.TempDir()
	positions, keys := filepath.Join(dir, "positions.json"), filepath.Join(dir, "keys.json")
	if err := os.WriteFile(positions, []byte(`{"for":{},"pass":1,"done":{"acme":"acme#0a1f#"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, []byte(`{"for":{},"pass":1,"done":{"acme":"acme#0a1f#bob@example.com#1795000000000#e-1"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := e.cmd(t, "retention", append(brokers, "--dlq-classes", "10m", "--checkpoints", positions)...)
	if err != nil {
		t.Fatalf("clean setup: %v\n%s", err, out)
	}
	for _, want := range []string{"acme", "1h", "table, live cells", "input topic " + e.topic, "40m1s", "0 breaches", e.topic + ".dlq.10m", "not created yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("clean statement does not say %q:\n%s", want, out)
		}
	}
	statementListsTheLedger(t, e, out)

	// One breach per store.
	if err := e.ac.SetGCPolicy(context.Background(), e.table, "c", bigtable.MaxAgePolicy(72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	testenv.AlterTopic(t, e.brokers, e.topic, testenv.AnyTimeAhead(map[string]string{"retention.ms": "604800000", "segment.ms": "300000"}))
	testenv.AlterTopic(t, e.brokers, e.topic+".dlq", map[string]string{"retention.ms": "-1"})
	out, err = e.cmd(t, "retention", append(brokers, "--format", "json", "--checkpoints", positions+","+keys)...)
	if codeOf(err) != 1 {
		t.Fatalf("planted breaches: exit %d, %v\n%s", codeOf(err), err, out)
	}
	var st struct {
		Clean    bool `json:"clean"`
		Breaches int  `json:"breaches"`
		Tenants  []struct {
			Tenant string `json:"tenant"`
			Stores []struct {
				Store, Breach string
			} `json:"stores"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	breaches := map[string]string{}
	for _, ten := range st.Tenants {
		for _, s := range ten.Stores {
			if s.Breach != "" && ten.Tenant == "acme" {
				breaches[s.Store] = s.Breach
			}
		}
	}
	for store, want := range map[string]string{
		"table, expired cells not yet collected":                         "max-age 3d, the tenants file needs 2d",
		"dead-letter topic " + e.topic + ".dlq, letters without payload": "keeps records forever",
		"input topic " + e.topic:                                         "keeps records forever; acme's TTL is 1h",
		"record timestamps of " + e.topic:                                "any time ahead",
		"checkpoint " + keys:                                             "holds row keys",
		"erasure ledger " + e.table + "-erasures, ids of erased users":   "keep their ids forever",
	} {
		if !strings.Contains(breaches[store], want) {
			t.Errorf("%s: breach %q, want it to say %q", store, breaches[store], want)
		}
	}
	if breaches["checkpoint "+positions] != "" {
		t.Errorf("a checkpoint of positions: breach %q", breaches["checkpoint "+positions])
	}
	if st.Clean || st.Breaches < 5 {
		t.Errorf("clean %t, %d breaches", st.Clean, st.Breaches)
	}

	statementCountsMinTTL(t, e, brokers)
}

// statementListsTheLedger: the ledger's records of acme live acme's 1h
// (longer than the topics' keeps), by forget's rule, then until Bigtable
// collects them; globex's its 3d.
func statementListsTheLedger(t *testing.T, e *env, out string) {
	t.Helper()
	ledger := logLines(out, "erasure ledger "+e.table+"-erasures, ids of erased users")
	if !strings.Contains(logLines(ledger, "acme"), "  7d1h  ") || !strings.Contains(logLines(ledger, "globex"), "  10d  ") {
		t.Errorf("the ledger's lines:\n%s\nin\n%s", ledger, out)
	}
}

// statementCountsMinTTL: with --ttl-from, an event may ask for as little
// as its tenant's min_ttl: globex's input topic is held to 2h, not to 3d.
func statementCountsMinTTL(t *testing.T, e *env, brokers []string) {
	t.Helper()
	if err := e.ac.SetGCPolicy(context.Background(), e.table, "c", bigtable.MaxAgePolicy(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	testenv.AlterTopic(t, e.brokers, e.topic+".dlq", map[string]string{"retention.ms": "1800000", "segment.ms": "120000", "message.timestamp.type": "LogAppendTime"})
	testenv.AlterTopic(t, e.brokers, e.topic, map[string]string{"retention.ms": "86400000", "segment.ms": "300000", "message.timestamp.after.max.ms": "300000"})
	out, err := e.cmd(t, "retention", append(brokers, "--tenant", "globex", "--ttl-from", "json:ttl")...)
	if codeOf(err) != 1 || !strings.Contains(out, "BREACH globex: input topic "+e.topic+" keeps records 1d") ||
		!strings.Contains(out, "; globex's events may ask for as little as min_ttl 2h") ||
		!strings.Contains(out, "down to min_ttl 2h") {
		t.Errorf("globex with --ttl-from: exit %d\n%s", codeOf(err), out)
	}
	if out, err := e.cmd(t, "retention", append(brokers, "--tenant", "globex")...); err != nil {
		t.Errorf("globex without --ttl-from, an input topic keeping 1d10m1s: %v\n%s", err, out)
	}
	// The workers write with --ttl-from (the table records it): a
	// statement run without the flag counts the min_ttl all the same.
	if _, _, err := tablemeta.NewStore(e.dc, e.table).ClaimTTLFrom(context.Background(),
		tablemeta.Claim{TTLFrom: "json:ttl", Change: true, By: "worker run", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	out, err = e.cmd(t, "retention", append(brokers, "--tenant", "globex")...)
	if codeOf(err) != 1 || !strings.Contains(out, "BREACH globex: input topic "+e.topic+" keeps records 1d") ||
		!strings.Contains(out, `(--ttl-from "json:ttl", the table's recorded setting; the TTL is 3d)`) {
		t.Errorf("globex without --ttl-from, the table's rows written with it: exit %d\n%s", codeOf(err), out)
	}
}
