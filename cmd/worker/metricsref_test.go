package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// checkScrape checks a scrape of every instrument the worker registers:
// every metric the alert rules and the dashboard query is in it, and the
// metrics reference is generated from it.
func checkScrape(t *testing.T, body string) {
	t.Helper()
	for _, file := range []struct{ path, expr string }{
		{"../../deploy/alerts/cellttl-rules.yaml", `(?m)^\s+expr: (.*)$`},
		{"../../deploy/grafana/cellttl-dashboard.json", `"expr": "(.*)"`},
	} {
		data, err := os.ReadFile(file.path)
		if err != nil {
			t.Fatal(err)
		}
		// Metric names, not the label names of matchers and groupings.
		exprs := strings.Join(regexp.MustCompile(file.expr).FindAllString(string(data), -1), "\n")
		exprs = regexp.MustCompile(`\{[^}]*\}|\b(?:by|without|on|ignoring|group_left|group_right) \([^)]*\)`).ReplaceAllString(exprs, "")
		names := regexp.MustCompile(`\b(?:cellttl|messaging|db)_[a-z_]+\b`).FindAllString(exprs, -1)
		if len(names) < 5 {
			t.Fatalf("found %d metric names in %s", len(names), file.path)
		}
		for _, name := range names {
			if !regexp.MustCompile(`(?m)^` + name + `[{ ]`).MatchString(body) {
				t.Errorf("%s queries %s, which a scrape of /metrics does not have", file.path, name)
			}
		}
	}
	checkReference(t, "../../docs/reference/metrics.md", metricsReference(body))
}

// registryScrape is /metrics of a worker reading Avro through a schema
// registry (a stand-in that answers as an empty one): the registry's
// instruments, which a worker reading JSON does not register.
func registryScrape(t *testing.T) string {
	t.Helper()
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		if r.URL.Path == "/config" {
			_, _ = w.Write([]byte(`{"compatibilityLevel":"BACKWARD"}`))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(reg.Close)
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--value-format", "avro", "--schema-registry-url", reg.URL)
	defer stop()
	_, body := testenv.MustGet(t, adminURL(t, logs)+"/metrics")
	if !regexp.MustCompile(`(?m)^cellttl_schema_registry_waiting[{ ]`).MatchString(body) {
		t.Fatalf("a worker reading Avro exports no registry metrics:\n%.2000s", body)
	}
	return body
}
