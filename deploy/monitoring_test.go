package deploy

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/labels"
)

// matches reports whether the label selector sel (matchLabels and
// matchExpressions, as Kubernetes reads them) selects the labels of o.
func matches(t *testing.T, sel any, have any) bool {
	t.Helper()
	set := labels.Set{}
	for k, v := range have.(object) {
		set[k] = str(v)
	}
	ml, _ := get(sel, "matchLabels").(object)
	for k, v := range ml {
		if set[k] != str(v) {
			return false
		}
	}
	for _, e := range list(get(sel, "matchExpressions")) {
		if str(get(e, "operator")) != "In" {
			t.Fatalf("expression %v: the test reads In alone", e)
		}
		in := false
		for _, v := range toStrings(get(e, "values")) {
			in = in || set[str(get(e, "key"))] == v
		}
		if !in {
			return false
		}
	}
	return true
}

// The monitoring objects plug into the usual stacks as applied: the
// Prometheus Operator's ServiceMonitor selects the metrics Service and its
// admin port, and it and the PrometheusRule carry the label
// kube-prometheus-stack selects by; GKE's PodMonitoring selects the worker
// pods and their admin port, and its Rules hold the alert groups; the
// NetworkPolicy admits those scrapers, on the admin port alone. Each
// stack's scrape (and the compose Prometheus's) gives the workers' targets
// the job the alert rules match.
func TestMonitoringPlugsIn(t *testing.T) {
	workers := build(t, "k8s/hpa")
	svc := workers["Service/cellttl-metrics"]
	pod := get(workers["Deployment/cellttl"], "spec", "template")

	mon := build(t, "k8s/monitoring")
	sm, rule := mon["ServiceMonitor/cellttl"], mon["PrometheusRule/cellttl"]
	if sm == nil || rule == nil {
		t.Fatalf("k8s/monitoring has %v", reflect.ValueOf(mon).MapKeys())
	}
	for name, o := range map[string]object{"ServiceMonitor": sm, "PrometheusRule": rule} {
		if str(get(o, "metadata", "labels", "release")) == "" {
			t.Errorf("%s has no release label: kube-prometheus-stack would not select it", name)
		}
	}
	if !matches(t, get(sm, "spec", "selector"), get(svc, "metadata", "labels")) {
		t.Errorf("the ServiceMonitor selects %v, not the metrics Service (%v)", get(sm, "spec", "selector"), get(svc, "metadata", "labels"))
	}
	if ep := list(get(sm, "spec", "endpoints"))[0]; str(get(ep, "port")) != str(get(list(get(svc, "spec", "ports"))[0], "name")) || str(get(ep, "path")) != "/metrics" {
		t.Errorf("the ServiceMonitor scrapes %v", ep)
	}

	// The Operator names the job after the Service unless relabelled.
	job := rulesJob(t)
	for _, ep := range list(get(sm, "spec", "endpoints")) {
		relabelled := false
		for _, rl := range list(get(ep, "relabelings")) {
			if str(get(rl, "targetLabel")) == "job" {
				relabelled = str(get(rl, "replacement")) == job && get(rl, "sourceLabels") == nil && (str(get(rl, "action")) == "" || str(get(rl, "action")) == "replace")
			}
		}
		if !relabelled {
			t.Errorf("the ServiceMonitor's endpoint %v does not relabel its targets' job to %q, the one the alert rules match", get(ep, "port"), job)
		}
	}

	gmp := build(t, "k8s/gmp")
	// Found by kind: its name is checked below.
	var pm object
	for name, o := range gmp {
		if strings.HasPrefix(name, "PodMonitoring/") {
			pm = o
		}
	}
	rules := gmp["Rules/cellttl"]
	if pm == nil || rules == nil {
		t.Fatalf("k8s/gmp has %v", reflect.ValueOf(gmp).MapKeys())
	}
	if !matches(t, get(pm, "spec", "selector"), get(pod, "metadata", "labels")) {
		t.Errorf("the PodMonitoring selects %v, not the worker pods (%v)", get(pm, "spec", "selector"), get(pod, "metadata", "labels"))
	}
	if ep := list(get(pm, "spec", "endpoints"))[0]; str(get(ep, "port")) != "admin" || str(get(ep, "path")) != "/metrics" {
		t.Errorf("the PodMonitoring scrapes %v", ep)
	}
	if !reflect.DeepEqual(get(rules, "spec", "groups"), get(rule, "spec", "groups")) {
		t.Error("the GKE Rules' groups differ from the PrometheusRule's")
	}
	// A PodMonitoring's targets take its name as their job.
	if name := str(get(pm, "metadata", "name")); name != job {
		t.Errorf("the PodMonitoring is named %q: its targets' job, and the alert rules match %q", name, job)
	}
	var compose struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	data, err := os.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	for _, sc := range compose.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if slices.Contains(st.Targets, "worker:8080") && sc.JobName != job {
				t.Errorf("prometheus.yml scrapes the worker as job %q, the alert rules match %q", sc.JobName, job)
			}
		}
	}

	np := build(t, "k8s/network")["NetworkPolicy/cellttl-worker"]
	if !matches(t, get(np, "spec", "podSelector"), get(pod, "metadata", "labels")) {
		t.Fatalf("the NetworkPolicy does not select the worker pods")
	}
	scrapers := map[string]struct{ ns, pod object }{
		"kube-prometheus-stack":   {object{"kubernetes.io/metadata.name": "monitoring"}, object{"app.kubernetes.io/name": "prometheus"}},
		"GKE managed collection":  {object{"kubernetes.io/metadata.name": "gke-gmp-system"}, object{"app.kubernetes.io/name": "collector"}},
		"the GMP operator":        {object{"kubernetes.io/metadata.name": "gmp-system"}, object{"app.kubernetes.io/name": "collector"}},
		"another namespace's pod": {object{"kubernetes.io/metadata.name": "payments"}, object{"app.kubernetes.io/name": "prometheus"}},
	}
	for name, s := range scrapers {
		admitted := false
		for _, rule := range list(get(np, "spec", "ingress")) {
			for _, from := range list(get(rule, "from")) {
				if matches(t, get(from, "namespaceSelector"), s.ns) && matches(t, get(from, "podSelector"), s.pod) {
					admitted = true
					if ports := list(get(rule, "ports")); len(ports) != 1 || str(get(ports[0], "port")) != "admin" {
						t.Errorf("%s is admitted on %v, want the admin port alone", name, ports)
					}
				}
			}
		}
		if want := name != "another namespace's pod"; admitted != want {
			t.Errorf("%s admitted %v, want %v", name, admitted, want)
		}
	}
}
