package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/release"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// adminURL finds the admin server's address in the worker's logs. It
// waits as long as a start-up may take under make test's load (the
// worker's checks, each attempt bounded by attemptTimeout): on two busy
// cores, 10 s was passed with the worker still in its first checks.
func adminURL(t *testing.T, logs *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`admin server listening" addr=(\S+)`)
	var url string
	testenv.Eventually(t, 6*attemptTimeout, func() (bool, string) {
		m := re.FindStringSubmatch(logs.String())
		if m == nil {
			return false, "no admin address in the logs"
		}
		url = "http://" + m[1]
		return true, ""
	})
	return url
}

// metricValue returns the value of the first sample of name whose labels
// contain every given label pair.
func metricValue(body, name string, labels ...string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		return v, err == nil
	}
	return 0, false
}

// metricSum adds up every series of name in a scrape.
func metricSum(body, name string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// A scrape of /metrics shows the counters with the values the events call
// for; /status and /readyz tell the same story.
func TestMetricsAndStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t)
	base := adminURL(t, logs)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == 200, fmt.Sprintf("/readyz %d: %s", code, body)
	})

	var values [][]byte
	for i := range 7 {
		values = append(values, click{EventID: fmt.Sprintf("m-%d", i), TenantID: "acme", UserID: "u"}.bytes())
	}
	for i := range 3 {
		values = append(values, click{EventID: fmt.Sprintf("g-%d", i), TenantID: "globex"}.bytes())
	}
	values = append(values, []byte("garbage"), []byte("{}"),
		click{EventID: "old", TenantID: "acme", OccurredAt: time.Now().Add(-3 * time.Hour).Format(time.RFC3339)}.bytes(),
		click{EventID: "ahead", TenantID: "globex", OccurredAt: time.Now().Add(time.Hour).Format(time.RFC3339)}.bytes())
	testenv.Produce(t, e.brokers, e.topic, values...)
	e.waitRows(t, 11, 30*time.Second)
	e.waitCommitted(t, 30*time.Second)

	type sample struct {
		name   string
		labels []string
		value  float64
	}
	want := []sample{
		{"cellttl_events_written_total", []string{`cellttl_tenant="acme"`}, 7},
		{"cellttl_events_written_total", []string{`cellttl_tenant="globex"`}, 4},
		{"cellttl_events_expired_total", []string{`cellttl_tenant="acme"`}, 1},
		{"cellttl_events_clamped_total", []string{`cellttl_tenant="globex"`}, 1},
		{"cellttl_events_dead_lettered_total", []string{`cellttl_tenant="_other"`}, 2},
		{"messaging_client_consumed_messages_total", []string{`messaging_destination_name="` + e.topic + `"`}, 14},
		{"messaging_client_sent_messages_total", []string{`messaging_destination_name="` + e.topic + `.dlq"`}, 2},
		{"cellttl_kafka_consumer_partitions", nil, 3},
		{"cellttl_config_reload_ok", nil, 1},
		{"cellttl_inflight_bytes", nil, 0},
		{"cellttl_dead_letters_total", []string{`reason="not_json"`}, 1},
		{"cellttl_dead_letters_total", []string{`reason="missing"`}, 1},
		{"cellttl_dead_letters_total", []string{`reason="bigtable_refused"`}, 0},
		{"cellttl_ready", []string{`check="kafka"`}, 1},
		{"cellttl_ready", []string{`check="bigtable"`}, 1},
		// The suite's input topic bounds no producer to --max-clock-skew
		// (Kafka 4's default lets records be stamped 1h ahead; 3.x's does
		// not bound them at all, nor does the in-process broker).
		{"cellttl_retention_shortfalls", []string{`store="input_topic"`}, 1},
		// The dead-letter topic keeps a letter for less than the file's
		// shortest TTL (acme's hour), on every broker.
		{"cellttl_retention_shortfalls", []string{`store="dead_letter_topic"`}, 0},
	}
	var body string
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		_, body = testenv.MustGet(t, base+"/metrics")
		for _, w := range want {
			if v, ok := metricValue(body, w.name, w.labels...); !ok || v != w.value {
				return false, fmt.Sprintf("%s%v = %v (found %t), want %v", w.name, w.labels, v, ok, w.value)
			}
		}
		// The broker holds the commit a moment before the worker records
		// that it does: wait for the worker's own account of it, all 14.
		if sum := metricSum(body, "cellttl_kafka_consumer_committed_offset"); sum != 14 {
			return false, fmt.Sprintf("cellttl_kafka_consumer_committed_offset sums to %v, want 14", sum)
		}
		// Everything settled: no partition's oldest event waits.
		if sum := metricSum(body, "cellttl_kafka_consumer_time_lag_seconds"); sum != 0 {
			return false, fmt.Sprintf("cellttl_kafka_consumer_time_lag_seconds sums to %v, want 0", sum)
		}
		return true, ""
	})
	if v, ok := metricValue(body, "db_client_operation_duration_seconds_count", `db_operation_name="MutateRows"`, `db_response_status_code="OK"`); !ok || v < 1 {
		t.Errorf("no Bigtable write latency recorded: %v %t", v, ok)
	}
	if v, ok := metricValue(body, "cellttl_kafka_consumer_rebalances_total"); !ok || v < 1 {
		t.Errorf("cellttl_kafka_consumer_rebalances_total %v (found %t), want the join counted", v, ok)
	}
	if v, ok := metricValue(body, "cellttl_batch_rows_sum"); !ok || v != 11 {
		t.Errorf("batch rows sum %v, want 11", v)
	}
	if _, ok := metricValue(body, "cellttl_config_info", `config_version="`); !ok {
		t.Error("no cellttl_config_info")
	}
	if _, ok := metricValue(body, "cellttl_build_info", `version="`+release.Version+`"`, `revision="`); !ok {
		t.Errorf("no cellttl_build_info of release %s", release.Version)
	}

	if v, ok := metricValue(body, "cellttl_inflight_limit_bytes"); !ok || v <= 0 {
		t.Errorf("cellttl_inflight_limit_bytes %v (found %t), want the fetch budget", v, ok)
	}

	checkScrape(t, body+registryScrape(t))

	// The tests' emulator: said loudly, in the log and on /status.
	if !strings.Contains(logs.String(), "BIGTABLE_EMULATOR_HOST is set") {
		t.Error("no warning that BIGTABLE_EMULATOR_HOST sends Bigtable requests to an emulator")
	}

	// The page as a client reads it.
	type page struct {
		Version, Revision string
		BigtableEmulator  string `json:"bigtable_emulator"`
		Config            struct {
			Version string
			Tenants map[string]string
		}
		Kafka  ingest.Status
		Lag    int64
		Events map[string]tenantCounts
		Totals eventCounts
	}
	// Without ?tenants=true the page names no tenant: who the customers
	// are is not for everyone who reaches the port.
	if _, brief := testenv.MustGet(t, base+"/status"); strings.Contains(brief, `"acme"`) || strings.Contains(brief, `"events"`) {
		t.Errorf("/status without ?tenants=true lists tenants:\n%s", brief)
	}
	code, statusBody := testenv.MustGet(t, base+"/status?tenants=true")
	var st page
	if err := json.Unmarshal([]byte(statusBody), &st); err != nil || code != 200 {
		t.Fatalf("/status %d: %v\n%s", code, err, statusBody)
	}
	if st.BigtableEmulator != os.Getenv("BIGTABLE_EMULATOR_HOST") {
		t.Errorf("/status bigtable_emulator %q, want %q", st.BigtableEmulator, os.Getenv("BIGTABLE_EMULATOR_HOST"))
	}
	var sum eventCounts
	for _, c := range st.Events {
		sum.Consumed, sum.Written, sum.Expired = sum.Consumed+c.Consumed, sum.Written+c.Written, sum.Expired+c.Expired
		sum.DeadLettered, sum.Clamped = sum.DeadLettered+c.DeadLettered, sum.Clamped+c.Clamped
	}
	if !st.Kafka.Joined || len(st.Kafka.Partitions) != 3 || st.Lag != 0 || st.Config.Tenants["acme"] != "1h" ||
		st.Events["acme"].Written != 7 || st.Events["acme"].TTL != "1h" || st.Totals != sum || st.Config.Version == "" ||
		st.Version != release.Version || st.Revision == "" {
		t.Errorf("/status (totals %+v, the tenants' sum %+v): %s", st.Totals, sum, statusBody)
	}
	// The brief page: the same but for the two lists of tenants.
	code, brief := testenv.MustGet(t, base+"/status?tenants=false")
	st = page{}
	if err := json.Unmarshal([]byte(brief), &st); err != nil || code != 200 {
		t.Fatalf("/status?tenants=false %d: %v\n%s", code, err, brief)
	}
	if st.Config.Tenants != nil || st.Events != nil || st.Totals != sum || len(st.Kafka.Partitions) != 3 || st.Config.Version == "" ||
		strings.Contains(brief, `"tenants"`) || strings.Contains(brief, `"events"`) {
		t.Errorf("/status?tenants=false: %s", brief)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
