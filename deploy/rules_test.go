package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cellttl/cellttl/internal/release"
)

// promtool finds promtool, which scripts/test.sh installs from Debian's
// prometheus package; without it the test says so and skips, unless
// TESTENV_REQUIRE_PROMTOOL is set.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("TESTENV_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool not found; scripts/test.sh installs it")
		}
		t.Skip("promtool not installed (make test installs it)")
	}
	return path
}

// ruleCopies are the three copies of the alert rules: the plain
// Prometheus file, the Prometheus Operator's PrometheusRule and Managed
// Service for Prometheus' Rules.
var ruleCopies = []string{"alerts/cellttl-rules.yaml", "k8s/components/monitoring/prometheusrule.yaml", "k8s/components/gmp/rules.yaml"}

// ruleGroups reads the rule groups of a copy: top-level in the plain
// file, under spec in the others.
func ruleGroups(t *testing.T, path string) []any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []any `yaml:"groups"`
		Spec   struct {
			Groups []any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if doc.Groups != nil {
		return doc.Groups
	}
	return doc.Spec.Groups
}

// installLabels tell one install from another under one Prometheus.
var installLabels = []string{"namespace", "cluster"}

var (
	aggregationRe = regexp.MustCompile(`\b(sum|min|max|avg|count|group|stddev|stdvar|topk|bottomk|quantile|count_values)\s*(?:(by|without)\s*\(([^)]*)\)\s*)?\(`)
	matchingRe    = regexp.MustCompile(`\b(on|ignoring)\s*\(([^)]*)\)`)
)

func labelList(s string) []string {
	var out []string
	for _, l := range strings.Split(s, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// mixesInstalls names what in expr puts series of several installs
// together: an aggregation that does not keep namespace and cluster, or a
// vector match that leaves them out. An empty on () joins vectors of one
// element each (absent's), which belong to no install.
func mixesInstalls(expr string) []string {
	var bad []string
	keeps := func(ls []string) bool {
		return !slices.ContainsFunc(installLabels, func(l string) bool { return !slices.Contains(ls, l) })
	}
	drops := func(ls []string) bool {
		return slices.ContainsFunc(installLabels, func(l string) bool { return slices.Contains(ls, l) })
	}
	for _, m := range aggregationRe.FindAllStringSubmatch(expr, -1) {
		ls := labelList(m[3])
		if m[2] == "" || m[2] == "by" && !keeps(ls) || m[2] == "without" && drops(ls) {
			bad = append(bad, strings.TrimSpace(strings.TrimSuffix(m[0], "(")))
		}
	}
	for _, m := range matchingRe.FindAllStringSubmatch(expr, -1) {
		ls := labelList(m[2])
		if m[1] == "on" && len(ls) > 0 && !keeps(ls) || m[1] == "ignoring" && drops(ls) {
			bad = append(bad, m[0])
		}
	}
	return bad
}

// scopeLabels are the labels Managed Service for Prometheus scopes a
// namespace's Rules by: it adds them to every selector and every alert,
// and refuses a rule that sets one, or matches one otherwise.
var (
	scopeLabels    = []string{"project_id", "location", "cluster", "namespace"}
	scopeMatcherRe = regexp.MustCompile(`\{[^}]*\b(project_id|location|cluster|namespace)\s*(=~|!~|!=|=)`)
	jobMatcherRe   = regexp.MustCompile(`\bjob\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// rulesJob is the scrape job the alert rules match, the one name each
// stack's scrape object must give the workers' targets.
func rulesJob(t *testing.T) string {
	t.Helper()
	jobs := map[string]bool{}
	for _, g := range ruleGroups(t, ruleCopies[0]) {
		for _, r := range list(get(g, "rules")) {
			for _, m := range jobMatcherRe.FindAllStringSubmatch(str(get(r, "expr")), -1) {
				if m[1] != "=" {
					t.Errorf("alert %s matches job%s%q: the rules match one job by name", str(get(r, "alert")), m[1], m[2])
				}
				jobs[m[2]] = true
			}
		}
	}
	if len(jobs) != 1 {
		t.Fatalf("the alert rules match the jobs %v, want one", jobs)
	}
	var job string
	for j := range jobs {
		job = j
	}
	return job
}

// unitTests reads cellttl-rules.test.yaml: each test's name, the
// namespaces and clusters of its input series, and the alerts it expects
// to fire.
type unitTest struct {
	Name        string `yaml:"name"`
	InputSeries []struct {
		Series string `yaml:"series"`
	} `yaml:"input_series"`
	AlertRuleTest []alertTest `yaml:"alert_rule_test"`
}

// alertTest is one evaluation of a unit test: the alert, and those of it
// expected to fire.
type alertTest struct {
	Alertname string `yaml:"alertname"`
	ExpAlerts []any  `yaml:"exp_alerts"`
}

// installs counts the distinct values of label among the test's series.
func (u unitTest) installs(label string) int {
	re := regexp.MustCompile(`\b` + label + `="([^"]*)"`)
	seen := map[string]bool{}
	for _, s := range u.InputSeries {
		if m := re.FindStringSubmatch(s.Series); m != nil {
			seen[m[1]] = true
		}
	}
	return len(seen)
}

// The alert rules are valid, each alert's unit tests pass (one that fires,
// one that stays silent), and the three copies hold the same groups. Each
// alert keeps installs apart: it aggregates by namespace and cluster, and
// has a unit test of several installs (two namespaces, two clusters) where
// the one in trouble fires. No rule sets or matches a label Managed
// Service for Prometheus scopes by.
func TestAlertRules(t *testing.T) {
	promtool := promtool(t)
	for _, args := range [][]string{{"check", "rules", "cellttl-rules.yaml"}, {"test", "rules", "cellttl-rules.test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "alerts"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
	plain := ruleGroups(t, ruleCopies[0])
	if len(plain) == 0 {
		t.Fatalf("%s holds no groups", ruleCopies[0])
	}
	for _, path := range ruleCopies[1:] {
		if !reflect.DeepEqual(plain, ruleGroups(t, path)) {
			t.Errorf("the groups of deploy/%s differ from deploy/alerts/cellttl-rules.yaml", path)
		}
	}
	tests, err := os.ReadFile("alerts/cellttl-rules.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Tests []unitTest `yaml:"tests"`
	}
	if err := yaml.Unmarshal(tests, &suite); err != nil {
		t.Fatalf("alerts/cellttl-rules.test.yaml: %v", err)
	}
	runbook, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range plain {
		for _, r := range list(get(g, "rules")) {
			name, expr := str(get(r, "alert")), str(get(r, "expr"))
			if str(get(r, "annotations", "runbook")) == "" {
				t.Errorf("alert %s has no runbook", name)
			}
			// The runbook of the release the rules ship with (main
			// between releases), at its section, which says what to do.
			url := "https://github.com/cellttl/cellttl/blob/" + docsRef() + "/docs/runbook.md#" + strings.ToLower(name)
			section := regexp.MustCompile(`(?s)\n## ` + name + `\n(.*?)(\n## |$)`).FindSubmatch(runbook)
			if got := str(get(r, "annotations", "runbook_url")); got != url || section == nil || !strings.Contains(string(section[1]), "What to do") {
				t.Errorf("alert %s: runbook_url %q, want %q, with a section that says what to do in docs/runbook.md", name, got, url)
			}
			// Pages are for symptoms: events late, unsettled or living
			// past their TTL, erasures that may not hold.
			symptoms := []string{"CellttlEventsDelayed", "CellttlCommitStuck", "CellttlTransactionHeld", "CellttlErasureLedgerStale", "CellttlRetentionBreached"}
			if sev := str(get(r, "labels", "severity")); sev != map[bool]string{true: "critical", false: "warning"}[slices.Contains(symptoms, name)] {
				t.Errorf("alert %s has severity %s: page on symptoms, warn on causes", name, sev)
			}
			if c := strings.Count(string(tests), "alertname: "+name+"\n"); c < 2 {
				t.Errorf("alert %s has %d unit tests, want one that fires and one that does not", name, c)
			}

			// One Prometheus, many installs: one's series neither fire
			// nor hide another's alert.
			if bad := mixesInstalls(expr); len(bad) > 0 {
				t.Errorf("alert %s puts installs together: %s (keep %v apart)", name, strings.Join(bad, "; "), installLabels)
			}
			if aggregationRe.MatchString(expr) && !slices.ContainsFunc(suite.Tests, func(u unitTest) bool {
				return strings.HasPrefix(u.Name, "per install") && u.installs("namespace") >= 2 && u.installs("cluster") >= 2 &&
					slices.ContainsFunc(u.AlertRuleTest, func(a alertTest) bool { return a.Alertname == name && len(a.ExpAlerts) > 0 })
			}) {
				t.Errorf("alert %s aggregates, and no \"per install\" unit test (two namespaces, two clusters) fires it for one install", name)
			}
			for _, l := range scopeLabels {
				if get(r, "labels", l) != nil {
					t.Errorf("alert %s sets the label %s: Managed Service for Prometheus refuses it", name, l)
				}
			}
			if m := scopeMatcherRe.FindStringSubmatch(expr); m != nil {
				t.Errorf("alert %s matches on %s: Managed Service for Prometheus refuses it", name, m[1])
			}
		}
	}
	rulesJob(t)
}

func TestMixesInstalls(t *testing.T) {
	for expr, want := range map[string]bool{
		`sum by (namespace, cluster) (rate(x[5m])) > 0`:                        false,
		`count by (namespace, cluster) (count by (namespace, cluster, v) (x))`: false,
		`max without (pod) (x)`:                                                false,
		`x > 0 unless on (namespace, cluster) y`:                               false,
		`absent(x == 1) and on () absent(y)`:                                   false,
		`sum(x) > 1000`:                                                        true,
		`max by (pod) (x) > 0`:                                                 true,
		`max by (namespace, pod) (x) > 0`:                                      true,
		`count(count by (namespace, cluster, v) (x))`:                          true,
		`max without (namespace) (x)`:                                          true,
		`x unless on (pod) y`:                                                  true,
		`x unless ignoring (cluster) y`:                                        true,
		`sum_over_time(x[5m]) > 0`:                                             false,
	} {
		if got := len(mixesInstalls(expr)) > 0; got != want {
			t.Errorf("mixesInstalls(%q) = %v, want %v", expr, mixesInstalls(expr), want)
		}
	}
}

// dashboard is the Grafana dashboard's variables and panels.
type dashboard struct {
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Multi      bool   `json:"multi"`
			IncludeAll bool   `json:"includeAll"`
			AllValue   string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID          int    `json:"id"`
		Type        string `json:"type"`
		Title       string `json:"title"`
		Description string `json:"description"`
		Targets     []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("grafana/cellttl-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/cellttl-dashboard.json: %v", err)
	}
	return d
}

var (
	groupingRe = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	rangeRe    = regexp.MustCompile(`\[[^\]]*\]`)
	// A name, its matchers, and a parenthesis that makes it a function.
	nameRe   = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*(\()?`)
	keywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan"}
)

// selector is a metric a query reads and its matchers.
type selector struct{ name, matchers string }

// selectors lists the metrics expr reads, with their matchers: every name
// that is no function, aggregation or keyword, once grouping clauses and
// ranges are taken out.
func selectors(expr string) []selector {
	expr = rangeRe.ReplaceAllString(groupingRe.ReplaceAllString(expr, " "), " ")
	var out []selector
	for _, m := range nameRe.FindAllStringSubmatch(expr, -1) {
		if m[3] != "" && m[2] == "" || slices.Contains(keywords, m[1]) {
			continue
		}
		out = append(out, selector{m[1], m[2]})
	}
	return out
}

// metricName is a series' metric as docs/reference/metrics.md names it:
// a histogram's, without the suffix of its series.
func metricName(series string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		series = strings.TrimSuffix(series, suffix)
	}
	return series
}

var describedRe = regexp.MustCompile(`\b(?:cellttl|db|messaging)_[a-z_]+\b`)

// The dashboard shows what operators look for, per install (cluster and
// namespace variables, which every query follows), each panel says which
// metrics it shows, and every query parses: promtool checks them as
// recording rules, Grafana's variables replaced.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Multi && v.IncludeAll && v.AllValue == ".*"
	}
	for _, v := range installLabels {
		if !vars[v] {
			t.Errorf("no %s variable that takes several values and all (.*, which matches a series without the label)", v)
		}
	}
	var exprs []string
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		queried := map[string]bool{}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			sels := selectors(tg.Expr)
			if len(sels) == 0 {
				t.Errorf("panel %q: no metric found in %s", p.Title, tg.Expr)
			}
			for _, s := range sels {
				queried[metricName(s.name)] = true
				for _, v := range installLabels {
					if !strings.Contains(s.matchers, fmt.Sprintf(`%s=~"$%s"`, v, v)) {
						t.Errorf("panel %q reads %s%s, not filtered by $%s", p.Title, s.name, s.matchers, v)
					}
				}
			}
		}
		// A description names the metrics its panel shows, and no other.
		described := map[string]bool{}
		for _, name := range describedRe.FindAllString(p.Description, -1) {
			described[name] = true
			if !queried[name] {
				t.Errorf("panel %q: its description names %s, which it does not query", p.Title, name)
			}
		}
		for name := range queried {
			if !described[name] {
				t.Errorf("panel %q queries %s, which its description does not name", p.Title, name)
			}
		}
	}
	// What the dashboard must answer, as a metric (and grouping) some panel
	// queries.
	for _, want := range []string{
		"sum by (cellttl_tenant) (rate(cellttl_events_written_total",
		"max by (cluster, namespace, messaging_destination_partition_id) (cellttl_kafka_consumer_committed_lag",
		"max by (cluster, namespace, messaging_destination_partition_id) (cellttl_kafka_consumer_lag",
		"max by (cluster, namespace, messaging_destination_partition_id) (cellttl_kafka_consumer_time_lag_seconds",
		"cellttl_kafka_consumer_stalled_partitions",
		"cellttl_batch_duration_seconds_bucket",
		"cellttl_bigtable_retries_total", "cellttl_retries_total",
		"cellttl_bigtable_throttled_total", "cellttl_bigtable_throttle_wait_seconds_total", "cellttl_bigtable_write_rate_limit_per_second",
		"cellttl_inflight_bytes", "cellttl_inflight_limit_bytes",
		"sum by (reason) (rate(cellttl_dead_letters_total",
		"max by (cluster, namespace, instance, pod, config_version) (cellttl_config_info",
	} {
		if !slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("no dashboard panel queries %s", want)
		}
	}
	promtool := promtool(t)
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$namespace", ".*", "$cluster", ".*")
	var rules []map[string]string
	for _, e := range exprs {
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query:%d", len(rules)), "expr": grafana.Replace(e)})
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("a dashboard query does not parse: %v\n%s", err, msg)
	}
}

// docsRef is the git reference at which the docs of this tree are read:
// the release's tag, or main between releases (a -dev version has none).
// scripts/release.sh --version moves the rules' links.
func docsRef() string {
	if strings.Contains(release.Version, "-") {
		return "main"
	}
	return "v" + release.Version
}

func TestSelectors(t *testing.T) {
	got := selectors(`histogram_quantile(0.99, sum by (le) (rate(db_x_bucket{a="1",b=~"$b"}[$__rate_interval]))) / on (le) sum(y) and bool cellttl_z`)
	want := []selector{{"db_x_bucket", `{a="1",b=~"$b"}`}, {"y", ""}, {"cellttl_z", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("selectors = %q, want %q", got, want)
	}
}
