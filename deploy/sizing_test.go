package deploy

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// sizingTables reads the two tables of docs/operations.md's "Sizing": what
// was measured (first column to second), and what the manifests make of
// it (the same).
func sizingTables(t *testing.T) (measured, planned map[string]string) {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?s)\n### Sizing\n(.*?)\n## `).FindSubmatch(doc)
	if section == nil {
		t.Fatal(`docs/operations.md has no "### Sizing" section`)
	}
	var tables []map[string]string
	var cur map[string]string
	for _, line := range strings.Split(string(section[1]), "\n") {
		if !strings.HasPrefix(line, "|") {
			cur = nil
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if cur == nil {
			cur = map[string]string{}
			tables = append(tables, cur)
			continue // the header
		}
		if strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || len(cells) < 2 {
			continue
		}
		cur[strings.TrimSpace(cells[0])] = strings.TrimSpace(cells[1])
	}
	if len(tables) != 2 {
		t.Fatalf("Sizing has %d tables, want the measured figures and the manifests' plan", len(tables))
	}
	return tables[0], tables[1]
}

// figure reads the number at the start of a cell ("9.65 µs", "36,000",
// "128 MiB"), in the unit it names.
func figure(t *testing.T, cell string) float64 {
	t.Helper()
	m := regexp.MustCompile(`^([0-9][0-9,]*(?:\.[0-9]+)?)`).FindString(cell)
	v, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", ""), 64)
	if err != nil {
		t.Fatalf("no figure in %q", cell)
	}
	return v
}

// row returns a table's cell for what, failing when there is none.
func row(t *testing.T, table map[string]string, what string) string {
	t.Helper()
	cell, ok := table[what]
	if !ok {
		t.Fatalf("Sizing has no row %q", what)
	}
	return cell
}

// The sizing the docs give is the arithmetic of the measured figures and
// the manifests as shipped: the CPU a pod runs at before the HPA adds one
// (its request times the target), the events a pod takes and the pods a
// rate needs at that CPU, and a pod's memory in the example, which must fit
// under GOMEMLIMIT, itself under the limit. An edit of the manifests or of
// a figure that leaves the other behind fails it.
func TestSizingMatchesTheManifests(t *testing.T) {
	measured, planned := sizingTables(t)
	objs := compose(t, "hpa")
	ctr := list(get(objs["Deployment/cellttl"], "spec", "template", "spec", "containers"))[0]
	request := resource.MustParse(str(get(ctr, "resources", "requests", "cpu")))
	limit := resource.MustParse(str(get(ctr, "resources", "limits", "memory")))
	var gomem int64
	for _, e := range list(get(ctr, "env")) {
		if str(get(e, "name")) == "GOMEMLIMIT" {
			gomem, _ = goMemLimit(str(get(e, "value")))
		}
	}
	var target int
	for _, m := range list(get(objs["HorizontalPodAutoscaler/cellttl"], "spec", "metrics")) {
		if str(get(m, "resource", "name")) == "cpu" {
			target, _ = get(m, "resource", "target", "averageUtilization").(int)
		}
	}
	if gomem == 0 || target == 0 {
		t.Fatalf("GOMEMLIMIT %d, HPA CPU target %d%%: the manifests do not say", gomem, target)
	}
	const mib = 1 << 20

	cores := request.AsApproximateFloat64() * float64(target) / 100
	perEvent := figure(t, row(t, measured, "worker CPU per event of 315 B")) * 1e-6
	rss := figure(t, row(t, measured, "peak RSS at full speed, 200 partitions, 100,000 tenants"))
	perErasure := figure(t, row(t, measured, "RSS per erasure in force"))
	pod := rss + 1_000_000*perErasure/mib

	for what, want := range map[string]string{
		"CPU a pod uses before the HPA adds one (request × target)":                            fmt.Sprintf("%.2f cores", cores),
		"events/s of 315 B a pod takes at that CPU":                                            thousands(math.Round(cores/perEvent/1000) * 1000),
		"pods for 1M events/s of 315 B":                                                        fmt.Sprint(math.Ceil(1e6 * perEvent / cores)),
		"memory of a pod with 200 partitions, 100,000 tenants and 1,000,000 erasures in force": fmt.Sprintf("%.0f MiB", pod),
		"the Go runtime's soft limit (`GOMEMLIMIT`)":                                           fmt.Sprintf("%d MiB", gomem/mib),
		"the pod's memory limit":                                                               fmt.Sprintf("%d MiB", limit.Value()/mib),
	} {
		if got := row(t, planned, what); got != want {
			t.Errorf("Sizing, %q: %q; the figures and the manifests give %q", what, got, want)
		}
	}
	if pod*mib > float64(gomem) || gomem >= limit.Value() {
		t.Errorf("the example pod needs %.0f MiB, GOMEMLIMIT is %d MiB and the limit %d MiB: want the pod under GOMEMLIMIT, and GOMEMLIMIT under the limit", pod, gomem/mib, limit.Value()/mib)
	}
}

// thousands writes n with commas: 36,000.
func thousands(n float64) string {
	s := strconv.FormatFloat(n, 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
