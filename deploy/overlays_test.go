package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The kustomizations of deploy/k8s that a user applies or builds on.
var (
	// examples run as shipped; their tenants are examples. All but
	// google-cloud run here too: it needs Google's Kafka and Prometheus.
	examples = []string{"k8s/examples/quickstart", "k8s/examples/tenants-dir", "k8s/examples/google-cloud"}
	runHere  = []string{"k8s/examples/quickstart", "k8s/examples/tenants-dir"}
	// placeholders are the overlays earlier releases shipped, kept for the
	// overlays built on them: their tenants file is the base's placeholder,
	// which the worker refuses.
	placeholders = []string{"k8s/hpa", "k8s/keda", "k8s/tenants-dir"}
	overlays     = slices.Concat(examples, placeholders)

	// components are the optional parts, each a kustomize Component that
	// composes with any other, in any order; of the autoscalers, one or
	// none.
	components  = []string{"network", "tenants-dir", "monitoring", "gmp", "retime", "offboard"}
	autoscalers = []string{"", "hpa", "keda"}
)

// compose renders, as a user's overlay would, the base with the given
// components of deploy/k8s/components, in that order, and the example
// tenants in place of the placeholder.
func compose(t *testing.T, comps ...string) map[string]object {
	t.Helper()
	return build(t, composeDir(t, comps...))
}

// composeDir writes the overlay compose renders, and returns its
// directory.
func composeDir(t *testing.T, comps ...string) string {
	t.Helper()
	dir := t.TempDir()
	k8s, err := filepath.Abs("k8s")
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes relative paths only.
	rel, err := filepath.Rel(dir, k8s)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s/base\n", rel)
	if len(comps) > 0 {
		b.WriteString("components:\n")
		for _, c := range comps {
			fmt.Fprintf(&b, "  - %s/components/%s\n", rel, c)
		}
	}
	b.WriteString("configMapGenerator:\n  - name: cellttl-tenants\n    behavior: replace\n    files:\n      - tenants.yaml\n")
	tenants, err := os.ReadFile("../tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"kustomization.yaml": b.String(), "tenants.yaml": string(tenants)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Every combination of the components renders, and to the same objects
// whatever the order they are listed in: a Component that patches what
// another adds (the tenants directory, the retime Job) does so either
// way. Each holds what it promises in every combination.
func TestEveryCombinationRenders(t *testing.T) {
	n := 0
	for _, scaler := range autoscalers {
		for mask := range 1 << len(components) {
			var comps []string
			if scaler != "" {
				comps = append(comps, scaler)
			}
			for i, c := range components {
				if mask&(1<<i) != 0 {
					comps = append(comps, c)
				}
			}
			n++
			name := strings.Join(comps, "+")
			if name == "" {
				name = "base"
			}
			t.Run(name, func(t *testing.T) {
				objs := compose(t, comps...)
				reversed := slices.Clone(comps)
				slices.Reverse(reversed)
				if other := compose(t, reversed...); !reflect.DeepEqual(objs, other) {
					t.Errorf("listed as %v and as %v, the components render differently", comps, reversed)
				}
				checkComposition(t, objs, comps)
			})
		}
	}
	if n != len(autoscalers)<<len(components) {
		t.Fatalf("%d combinations", n)
	}
}

// checkComposition checks what each component of comps promises in objs.
func checkComposition(t *testing.T, objs map[string]object, comps []string) {
	t.Helper()
	dep := objs["Deployment/cellttl"]
	if dep == nil {
		t.Fatal("no Deployment cellttl")
	}
	env := get(objs[envConfigMap(t, objs)], "data")
	depTenants := volume(dep, "tenants")
	for name, o := range podSpecs(objs) {
		// Every workload mounts the tenants the Deployment mounts, and
		// reads the settings the Deployment reads.
		if v := volume(objs[name], "tenants"); !reflect.DeepEqual(v, depTenants) {
			t.Errorf("%s mounts the tenants as %v, the Deployment as %v", name, v, depTenants)
		}
		for _, c := range list(get(o, "containers")) {
			if refs := envFromNames(c); !slices.Equal(refs, []string{envConfigMap(t, objs)}) {
				t.Errorf("%s reads its settings from %v", name, refs)
			}
		}
	}
	dir := slices.Contains(comps, "tenants-dir")
	if projected := get(depTenants, "projected") != nil; projected != dir {
		t.Errorf("tenants-dir %v, the Deployment's tenants projected %v", dir, projected)
	}
	if want := map[bool]string{true: "/etc/cellttl", false: "/etc/cellttl/tenants.yaml"}[dir]; str(get(env, "CELLTTL_TENANTS")) != want {
		t.Errorf("CELLTTL_TENANTS %v, want %s", get(env, "CELLTTL_TENANTS"), want)
	}
	for comp, kinds := range map[string][]string{
		"hpa": {"HorizontalPodAutoscaler/cellttl"}, "keda": {"ScaledObject/cellttl", "TriggerAuthentication/cellttl-kafka"},
		"network": {"NetworkPolicy/cellttl-worker"}, "monitoring": {"ServiceMonitor/cellttl", "PrometheusRule/cellttl"},
		"gmp": {"PodMonitoring/cellttl", "Rules/cellttl"}, "retime": {"Job/cellttl-retime"}, "offboard": {"Job/cellttl-offboard"},
	} {
		for _, k := range kinds {
			if (objs[k] != nil) != slices.Contains(comps, comp) {
				t.Errorf("%s in the overlay %v, %s listed %v", k, objs[k] != nil, comp, slices.Contains(comps, comp))
			}
		}
	}
	// KEDA's scaler reads the broker, group and topic from the workers'
	// own environment.
	if so := objs["ScaledObject/cellttl"]; so != nil {
		md := get(list(get(so, "spec", "triggers"))[0], "metadata")
		for param, variable := range map[string]string{"bootstrapServers": "CELLTTL_BROKERS", "consumerGroup": "CELLTTL_GROUP", "topic": "CELLTTL_TOPIC"} {
			if get(md, param) != nil || str(get(md, param+"FromEnv")) != variable || get(env, variable) == nil {
				t.Errorf("KEDA's trigger sets %s as %v / %sFromEnv %v: want it from the workers' %s", param, get(md, param), param, get(md, param+"FromEnv"), variable)
			}
		}
	}
}

// envConfigMap is the name of the workers' settings ConfigMap in objs,
// with its hash.
func envConfigMap(t *testing.T, objs map[string]object) string {
	t.Helper()
	var found []string
	for name := range objs {
		if strings.HasPrefix(name, "ConfigMap/cellttl-env-") {
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		t.Fatalf("ConfigMaps of the settings: %v, want one, named by its hash", found)
	}
	return found[0]
}

// envFromNames lists the ConfigMaps a container reads its environment
// from, as "ConfigMap/<name>".
func envFromNames(c any) []string {
	var out []string
	for _, ef := range list(get(c, "envFrom")) {
		out = append(out, "ConfigMap/"+str(get(ef, "configMapRef", "name")))
	}
	return out
}

// volume returns the pod volume of o named name.
func volume(o object, name string) any {
	for _, v := range list(get(o, "spec", "template", "spec", "volumes")) {
		if str(get(v, "name")) == name {
			return v
		}
	}
	return nil
}
