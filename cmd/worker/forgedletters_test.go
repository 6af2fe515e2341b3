package main

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/redrive"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A producer who reads the docs forges the worker's own headers: an event
// of an unlisted tenant stamped in 2286, with a header
// cellttl.source.timestamp in 2286 too, is dead-lettered; the tenant is
// listed and the letter redriven. Its cell must sit where its record's own
// time allows (record time + --max-clock-skew), not in 2286: the letter
// renames the record's cellttl.* headers, and redrive reads the worker's.
// A letter produced straight to the dead-letter topic, claiming a cut
// record of another topic, is not trusted; with a letter key, neither is
// an unsigned letter, nor a signed one copied into another dead-letter
// topic, while the worker's signed letters are written.
func TestForgedLettersBuyNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	keyFile := filepath.Join(t.TempDir(), "letter-keys")
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte("# the key that signs\n"+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stop, _ := e.startWorker(t, "--dlq-signing-key-file", keyFile)
	future := "2286-11-18T00:00:00.000Z"
	produced := time.Now()
	testenv.ProduceMessages(t, e.brokers, e.topic, kafka.Message{
		Value: click{EventID: "f-1", TenantID: "newco", UserID: "u-1", OccurredAt: future, Page: "/"}.bytes(),
		Headers: []kafka.Header{
			{Key: deadletter.HeaderSourceTimestamp, Value: []byte(future)},
			{Key: deadletter.HeaderReasonClass, Value: []byte("bigtable_refused")},
		},
	})
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	letters := testenv.ReadToEnd(t, e.brokers, e.topic+".dlq")
	if len(letters) != 1 {
		t.Fatalf("%d letters, want 1", len(letters))
	}
	for _, h := range letters[0].Headers {
		forged := h.Key == deadletter.HeaderSourceTimestamp && string(h.Value) == future ||
			h.Key == deadletter.HeaderReasonClass && string(h.Value) == "bigtable_refused"
		if forged {
			t.Errorf("the letter carries the record's forged %s=%s under the worker's name", h.Key, h.Value)
		}
	}
	if got := headerOf(letters[0], deadletter.HeaderProducerPrefix+deadletter.HeaderSourceTimestamp); got != future {
		t.Errorf("the record's own header is not kept renamed: %q", got)
	}

	// A letter straight to the dead-letter topic: a cut record of another
	// topic, at an offset that holds an event there.
	other := testenv.Name("other")
	testenv.CreateTopic(t, e.brokers, other, 1)
	testenv.Produce(t, e.brokers, other, click{EventID: "o-1", TenantID: "newco", OccurredAt: future, Page: "/"}.bytes())
	testenv.ProduceMessages(t, e.brokers, e.topic+".dlq", kafka.Message{Headers: []kafka.Header{
		{Key: deadletter.HeaderSourceTopic, Value: []byte(other)},
		{Key: deadletter.HeaderSourcePartition, Value: []byte("0")},
		{Key: deadletter.HeaderSourceOffset, Value: []byte("0")},
		{Key: deadletter.HeaderTruncated, Value: []byte("true")},
		{Key: deadletter.HeaderReasonClass, Value: []byte("unlisted_tenant")},
	}})

	e.writeTenants(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n  newco: 3h\n")
	flags := []string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic, "--apply"}
	// --apply without a key must be told to trust unsigned letters.
	if _, err := redriveJSON(t.Context(), t, e, flags...); codeOf(err) != 2 || !strings.Contains(err.Error(), "--trust-unsigned-letters") {
		t.Errorf("redrive --apply without a key: %v, want a usage error naming --trust-unsigned-letters", err)
	}
	// Without the key, told to: the worker's letter is written where its
	// record's time allows, the forged one is not trusted, and the exit
	// status says so.
	rep, err := redriveJSON(t.Context(), t, e, append(flags, "--trust-unsigned-letters")...)
	if codeOf(err) != exitUntrusted || rep.Outcomes[redrive.Written] != 1 || rep.Outcomes[redrive.Untrusted] != 1 {
		t.Fatalf("redrive: %v: %+v, want the worker's letter written and the forged one untrusted", err, rep)
	}
	latest := produced.Add(5*time.Minute + (3*time.Hour - 48*time.Hour) + time.Minute)
	rows := e.rows(t)
	if len(rows) != 1 {
		t.Fatalf("%d rows after the redrive, want newco's f-1 alone", len(rows))
	}
	for key, r := range rows {
		for _, c := range cellsOf(r)["event"] {
			if at := c.Timestamp.Time(); at.After(latest) {
				t.Errorf("row %s: its cell sits at %s, past its record's time + skew (+ the TTL shift), %s", key, at.UTC(), latest.UTC())
			}
		}
	}
	// The worker's signed letter copied into another dead-letter topic,
	// where it would outlive its placement: its signature covers the topic.
	copied := kafka.Message{Key: letters[0].Key, Value: letters[0].Value, Headers: letters[0].Headers}
	testenv.CreateTopicWith(t, e.brokers, e.topic+".dlq.30d", 1, testenv.DeadLetterConfigs)
	testenv.ProduceMessages(t, e.brokers, e.topic+".dlq.30d", copied)
	// With the key: the unsigned letter and the copy are not trusted; the
	// signed one is (written again: the same cells).
	rep, err = redriveJSON(t.Context(), t, e, append(flags, "--dlq-signing-key-file", keyFile)...)
	if codeOf(err) != exitUntrusted || rep.Outcomes[redrive.Written] != 1 || rep.Outcomes[redrive.Untrusted] != 2 {
		t.Errorf("redrive with the key: %v: %+v, want the signed letter written, the unsigned one and the copy untrusted", err, rep)
	}
	// A key that signed none of them: nothing is trusted.
	other32 := make([]byte, 32)
	otherKey := filepath.Join(t.TempDir(), "other-key")
	if err := os.WriteFile(otherKey, []byte(base64.StdEncoding.EncodeToString(other32)), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err = redriveJSON(t.Context(), t, e, append(flags, "--dlq-signing-key-file", otherKey)...)
	if codeOf(err) != exitUntrusted || rep.Outcomes[redrive.Untrusted] != 3 {
		t.Errorf("redrive with another key: %v: %+v, want all three untrusted", err, rep)
	}
}
