package deploy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// workloads returns every object of the shipped manifests that runs pods,
// by "kind/name", with its pod template.
func workloads(t *testing.T) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, overlay := range overlays {
		for name, o := range build(t, overlay) {
			if tmpl := get(o, "spec", "template"); tmpl != nil {
				out[overlay+" "+name] = o
			}
		}
	}
	out["k8s/components/retime Job/cellttl-retime"] = retimeJob(t)
	out["k8s/components/offboard Job/cellttl-offboard"] = offboardJob(t)
	if len(out) < 5 {
		t.Fatalf("found %d workloads: %v", len(out), out)
	}
	return out
}

// Every workload (the Deployment under each overlay, every Job) passes
// Pod Security "restricted" as Kubernetes' own admission evaluates it, has
// resource requests and a memory limit, mounts no service account token,
// and runs as the identity its job needs, not one shared.
func TestPodSecurityRestricted(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// By the pod's component: the setup Job's name carries the release.
	identity := map[string]string{"worker": "cellttl-worker", "setup": "cellttl-admin", "retime": "cellttl-retention", "offboard": "cellttl-retention"}
	for name, o := range workloads(t) {
		data, err := json.Marshal(get(o, "spec", "template"))
		if err != nil {
			t.Fatal(err)
		}
		var tmpl corev1.PodTemplateSpec
		if err := json.Unmarshal(data, &tmpl); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		res := policy.AggregateCheckResults(eval.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec))
		if !res.Allowed {
			t.Errorf("%s fails Pod Security restricted: %s", name, strings.Join(res.ForbiddenDetails, "; "))
		}
		spec := tmpl.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s mounts a service account token (it does not call the Kubernetes API)", name)
		}
		if want := identity[tmpl.Labels["app.kubernetes.io/component"]]; want == "" || spec.ServiceAccountName != want {
			t.Errorf("%s runs as %q, want %q", name, spec.ServiceAccountName, want)
		}
		// A Secret mounted for a non-root user is readable only through
		// the pod's fsGroup.
		for _, v := range spec.Volumes {
			if v.Secret != nil && (spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil ||
				spec.SecurityContext.RunAsGroup == nil || *spec.SecurityContext.FSGroup != *spec.SecurityContext.RunAsGroup) {
				t.Errorf("%s mounts the Secret %s without an fsGroup of its runAsGroup: the worker could not read it", name, v.Secret.SecretName)
			}
			if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0) {
				t.Errorf("%s: the Secret %s is readable by others", name, v.Secret.SecretName)
			}
		}
		for _, c := range spec.Containers {
			r := c.Resources
			if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
				t.Errorf("%s container %s: requests %v, limits %v; want CPU and memory requests and a memory limit", name, c.Name, r.Requests, r.Limits)
			}
		}
	}
}

// Only the scraper reaches the worker pods, and only on the admin port.
func TestNetworkPolicy(t *testing.T) {
	for _, overlay := range overlays {
		objs := build(t, overlay)
		np := objs["NetworkPolicy/cellttl-worker"]
		if np == nil {
			t.Fatalf("%s: no NetworkPolicy cellttl-worker", overlay)
		}
		pods := get(objs["Deployment/cellttl"], "spec", "template", "metadata", "labels").(object)
		for k, v := range get(np, "spec", "podSelector", "matchLabels").(object) {
			if pods[k] != v {
				t.Errorf("%s: the NetworkPolicy selects %s=%v, the worker pods have %v", overlay, k, v, pods[k])
			}
		}
		if types := toStrings(get(np, "spec", "policyTypes")); len(types) != 1 || types[0] != "Ingress" {
			t.Errorf("%s: policyTypes %v", overlay, types)
		}
		rules := list(get(np, "spec", "ingress"))
		if len(rules) != 1 {
			t.Fatalf("%s: %d ingress rules, want the scraper's alone", overlay, len(rules))
		}
		from := list(get(rules[0], "from"))
		ports := list(get(rules[0], "ports"))
		if len(from) == 0 || len(ports) != 1 || str(get(ports[0], "port")) != "admin" {
			t.Errorf("%s: ingress %v: want a selected peer, on the admin port only", overlay, rules[0])
		}
		// The peer is the scraper, as rendered: kustomize must not have
		// written the worker's labels into it.
		for _, f := range from {
			peer := get(f, "podSelector", "matchLabels")
			if get(f, "namespaceSelector") == nil || peer == nil {
				t.Errorf("%s: an ingress peer without a namespace and a pod selector: %v", overlay, f)
			} else if v := get(peer, "app.kubernetes.io/name"); v != "prometheus" && v != "collector" || len(peer.(object)) != 1 {
				t.Errorf("%s: the ingress peer selects pods %v, want Prometheus's or GKE's collectors", overlay, peer)
			}
		}
	}
}

// No secret is in the shipped manifests' arguments or variables: the
// Kafka password is a file of a mounted Secret (arguments show in process
// lists, variables in kubectl describe).
func TestNoSecretInManifests(t *testing.T) {
	for name, o := range workloads(t) {
		for _, c := range list(get(o, "spec", "template", "spec", "containers")) {
			for _, a := range toStrings(get(c, "args")) {
				if strings.Contains(strings.ToLower(a), "password") && !strings.Contains(a, "password-file") {
					t.Errorf("%s passes %q as an argument", name, a)
				}
			}
			for _, e := range list(get(c, "env")) {
				n := str(get(e, "name"))
				if strings.Contains(n, "PASSWORD") && !strings.HasSuffix(n, "_FILE") {
					t.Errorf("%s sets %s in the environment: mount it as a file and use %s_FILE", name, n, n)
				}
			}
		}
	}
	data, err := os.ReadFile("docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(string(data)), "sasl_password") {
		t.Error("docker-compose.yaml holds a SASL password")
	}
}
