package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Producers who may stamp records into the future can buy retention: the
// worker says so in its log and /status, and with --strict-retention
// refuses to start until the topic bounds them within --max-clock-skew.
func TestFutureRecordTimestamps(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the timestamp bounds the broker applies")
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	testenv.AlterTopic(t, e.brokers, e.topic, testenv.AnyTimeAhead(nil))
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	var out, errOut strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := run(ctx, e.args("run", "--strict-retention"), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--strict-retention") || !strings.Contains(err.Error(), "message.timestamp.after.max.ms unbounded") {
		t.Fatalf("strict worker on an unbounded topic: %v\n%s", err, errOut.String())
	}

	// Without --strict-retention it runs, and says so.
	stop, logs := e.startWorker(t)
	url := adminURL(t, logs)
	rt := recordTimestamps(t, url)
	if rt.Bounded || rt.Type != "CreateTime" || !strings.Contains(logs.String(), "message.timestamp.after.max.ms=300000") {
		t.Errorf("unbounded topic: %+v; logs:\n%s", rt, logs)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Bounded within the skew: a strict worker starts, and readiness holds.
	testenv.AlterTopic(t, e.brokers, e.topic, map[string]string{"message.timestamp.after.max.ms": "300000"})
	stop, logs = e.startWorker(t, "--strict-retention")
	url = adminURL(t, logs)
	if rt := recordTimestamps(t, url); !rt.Bounded || rt.Setting != "message.timestamp.after.max.ms" {
		t.Errorf("bounded topic: %+v", rt)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 200, body
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Regression (review): difference.max.ms bounds too when after.max.ms
	// does not; LogAppendTime does whatever after.max.ms says (the broker
	// stamps each record, and the worker reads that time).
	cases := []struct {
		configs map[string]string
		bounded bool
		setting string
	}{
		{testenv.AnyTimeAhead(map[string]string{"message.timestamp.type": "LogAppendTime"}), true, "message.timestamp.type"},
	}
	if testenv.KafkaMajor() < 4 { // Kafka 4 removed difference.max.ms
		cases = append(cases, struct {
			configs map[string]string
			bounded bool
			setting string
		}{testenv.AnyTimeAhead(map[string]string{"message.timestamp.difference.max.ms": "60000"}), true, "message.timestamp.difference.max.ms"})
	}
	for _, tt := range cases {
		testenv.AlterTopic(t, e.brokers, e.topic, tt.configs)
		rt, err := kafkaconn.ReadRecordTimes(context.Background(), e.brokers, kafkaconn.Security{}, e.topic, 5*time.Minute)
		if err != nil || rt.Bounded != tt.bounded || rt.Setting != tt.setting {
			t.Errorf("%v: %+v, %v; want bounded %t by %s", tt.configs, rt, err, tt.bounded, tt.setting)
		}
	}
}

type recordTimes struct {
	Type    string `json:"type"`
	Setting string `json:"setting"`
	Bounded bool   `json:"bounded"`
	Summary string `json:"summary"`
}

func recordTimestamps(t *testing.T, url string) recordTimes {
	t.Helper()
	var page struct {
		RecordTimestamps recordTimes `json:"record_timestamps"`
	}
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		_, body := testenv.MustGet(t, url+"/status?tenants=false")
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			return false, err.Error()
		}
		return page.RecordTimestamps.Type != "", body
	})
	return page.RecordTimestamps
}

// Kafka 4.0 bounds how far ahead a producer may stamp a record to an hour
// by default (message.timestamp.after.max.ms, KIP-1030); 3.x did not bound
// it. On a topic with the broker's defaults the worker reads which: on 3.x
// producers may stamp any time ahead, on 4.x an hour, which is still past
// the default --max-clock-skew (5m) and within one of 2h.
func TestBrokerDefaultStampBound(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the broker's own default of message.timestamp.after.max.ms")
	testenv.NeedsBroker(t, "the broker's own default of message.timestamp.after.max.ms")
	major := testenv.KafkaMajor()
	if major == 0 {
		t.Skip("TESTENV_KAFKA_VERSION is not set: scripts/services.sh names the broker it started")
	}
	t.Parallel()
	brokers := testenv.Kafka(t)
	topic := testenv.Name("defaults")
	testenv.CreateTopic(t, brokers, topic, 1)
	for _, skew := range []time.Duration{5 * time.Minute, 2 * time.Hour} {
		rt, err := kafkaconn.ReadRecordTimes(context.Background(), brokers, kafkaconn.Security{}, topic, skew)
		if err != nil {
			t.Fatal(err)
		}
		wantAhead, wantBounded := time.Duration(-1), false
		if major >= 4 {
			wantAhead, wantBounded = time.Hour, skew >= time.Hour
		}
		if rt.AheadMax != wantAhead || rt.Bounded != wantBounded || rt.Setting != "message.timestamp.after.max.ms" {
			t.Errorf("Kafka %d, skew %s: ahead %s, bounded %t by %s (%s); want %s and %t", major, skew, rt.AheadMax, rt.Bounded, rt.Setting, rt.Summary, wantAhead, wantBounded)
		}
	}
}
