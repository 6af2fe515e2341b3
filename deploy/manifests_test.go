package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cellttl/cellttl/internal/release"
)

// setupSelector is the label selector the docs give kubectl for the first
// of the two applies: the setup Job and what it needs.
const setupSelector = "app.kubernetes.io/component in (config,setup)"

// setupJobName is the setup Job's name: the release's, dots as dashes (an
// object name is a DNS label).
func setupJobName() string { return "cellttl-setup-" + strings.ReplaceAll(release.Version, ".", "-") }

// setupJob returns the overlay's setup Job, whose name carries the release.
func setupJob(t *testing.T, objs map[string]object) object {
	t.Helper()
	var job object
	for name, o := range objs {
		if strings.HasPrefix(name, "Job/") && str(get(o, "metadata", "labels", "app.kubernetes.io/component")) == "setup" {
			if job != nil {
				t.Fatal("two setup Jobs")
			}
			job = o
		}
	}
	if job == nil {
		t.Fatal("no setup Job")
	}
	return job
}

// podSpecs returns the pod spec of every workload of objs, by kind/name.
func podSpecs(objs map[string]object) map[string]any {
	out := map[string]any{}
	for name, o := range objs {
		if spec := get(o, "spec", "template", "spec"); spec != nil {
			out[name] = spec
		}
	}
	return out
}

// What an apply as shipped does, overlay by overlay:
//   - every container runs this release's image, and the setup Job is
//     named by it (the next release's apply creates its own Job);
//   - the setup Job comes first: for Argo CD by sync wave, before the
//     Deployment, with everything it mounts or reads in its wave or an
//     earlier one; for kubectl, by the selector the docs give, which
//     selects the Job and everything it needs and not the workers;
//   - no replicas under an autoscaler (each apply would reset the count
//     and rebalance the group);
//   - GOMEMLIMIT below the memory limit with headroom, a startup probe
//     that outlasts the start-up timeout, spread over zones, and a PDB
//     that lets drains evict unready pods.
func TestAppliedAsShipped(t *testing.T) {
	sel, err := labels.Parse(setupSelector)
	if err != nil {
		t.Fatal(err)
	}
	// The retime and offboard Jobs, which no overlay holds, run the
	// release's image too.
	for name, job := range map[string]object{"retime": retimeJob(t), "offboard": offboardJob(t)} {
		for _, c := range list(get(job, "spec", "template", "spec", "containers")) {
			if img := str(get(c, "image")); !strings.HasSuffix(img, ":"+release.Version) {
				t.Errorf("the %s Job runs %s, not release %s", name, img, release.Version)
			}
		}
	}
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			objs := build(t, overlay)
			job := setupJob(t, objs)
			if name, want := str(get(job, "metadata", "name")), setupJobName(); name != want {
				t.Errorf("setup Job %s, want %s: a Job's template cannot change, so each release needs its own", name, want)
			}
			// Once per release: a finished Job stays, since a tool that
			// deleted it would create it again at its next sync (Argo CD's
			// auto-sync, any later kubectl apply) and run setup with the
			// admin identity again. Bounded: a Bigtable that never answers
			// fails it, within a deadline and a few retries.
			if ttl := get(job, "spec", "ttlSecondsAfterFinished"); ttl != nil {
				t.Errorf("the setup Job is deleted %vs after it finishes, and re-created by the next sync", ttl)
			}
			deadline, _ := get(job, "spec", "activeDeadlineSeconds").(int)
			backoff, _ := get(job, "spec", "backoffLimit").(int)
			if deadline <= 0 || deadline > 3600 || backoff < 1 || backoff > 6 {
				t.Errorf("setup Job activeDeadlineSeconds %v, backoffLimit %v: want a deadline within the hour and a few retries", get(job, "spec", "activeDeadlineSeconds"), get(job, "spec", "backoffLimit"))
			}
			// A refused command line or tenants file (exit status 2) fails
			// the Job at once: no retry can fix it.
			failsOn2 := false
			for _, r := range list(get(job, "spec", "podFailurePolicy", "rules")) {
				if str(get(r, "action")) == "FailJob" && str(get(r, "onExitCodes", "operator")) == "In" && slices.Contains(list(get(r, "onExitCodes", "values")), any(2)) {
					failsOn2 = true
				}
			}
			if !failsOn2 {
				t.Error("the setup Job retries a tenants file setup refused (exit status 2): want a podFailurePolicy that fails it")
			}
			if hook := get(job, "metadata", "annotations", "argocd.argoproj.io/hook"); hook != nil {
				t.Errorf("the setup Job is an Argo CD hook (%v): a hook is deleted and created again at every sync", hook)
			}
			for name, spec := range podSpecs(objs) {
				for _, c := range list(get(spec, "containers")) {
					if img := str(get(c, "image")); !strings.HasSuffix(img, ":"+release.Version) {
						t.Errorf("%s runs %s, not release %s", name, img, release.Version)
					}
				}
			}

			// Ordering.
			wave := func(o object) int {
				var w int
				fmt.Sscan(str(get(o, "metadata", "annotations", "argocd.argoproj.io/sync-wave")), &w)
				return w
			}
			selected := func(o object) bool {
				l := labels.Set{}
				for k, v := range get(o, "metadata", "labels").(object) {
					l[k] = str(v)
				}
				return sel.Matches(l)
			}
			dep := objs["Deployment/cellttl"]
			if !selected(job) || selected(dep) || wave(job) >= wave(dep) {
				t.Errorf("setup Job selected %v wave %d, Deployment selected %v wave %d: want the Job alone first", selected(job), wave(job), selected(dep), wave(dep))
			}
			pod := get(job, "spec", "template", "spec")
			needs := []string{"ServiceAccount/" + str(get(pod, "serviceAccountName"))}
			for _, c := range list(get(pod, "containers")) {
				for _, ef := range list(get(c, "envFrom")) {
					needs = append(needs, "ConfigMap/"+str(get(ef, "configMapRef", "name")))
				}
			}
			optional := map[string]bool{}
			for _, v := range list(get(pod, "volumes")) {
				if n := str(get(v, "configMap", "name")); n != "" {
					needs = append(needs, "ConfigMap/"+n)
				}
				for _, src := range list(get(v, "projected", "sources")) {
					if n := str(get(src, "configMap", "name")); n != "" {
						needs = append(needs, "ConfigMap/"+n)
						optional["ConfigMap/"+n] = get(src, "configMap", "optional") == true
					}
				}
			}
			for _, n := range needs {
				o := objs[n]
				if o == nil {
					if !optional[n] {
						t.Errorf("the setup Job needs %s, which the overlay does not have", n)
					}
					continue
				}
				if !selected(o) || wave(o) > wave(job) {
					t.Errorf("the setup Job needs %s: selected by %q %v, wave %d after the Job's %d", n, setupSelector, selected(o), wave(o), wave(job))
				}
			}

			// Autoscaled: no count in the Deployment.
			if get(dep, "spec", "replicas") != nil {
				t.Errorf("the Deployment sets replicas %v under an autoscaler", get(dep, "spec", "replicas"))
			}

			ctr := list(get(dep, "spec", "template", "spec", "containers"))[0]
			limit := resource.MustParse(str(get(ctr, "resources", "limits", "memory")))
			var gomem string
			for _, e := range list(get(ctr, "env")) {
				if str(get(e, "name")) == "GOMEMLIMIT" {
					gomem = str(get(e, "value"))
				}
			}
			if soft, ok := goMemLimit(gomem); !ok || soft > limit.Value()*9/10 || soft < limit.Value()/2 {
				t.Errorf("GOMEMLIMIT %q with a memory limit of %s: want between 50%% and 90%% of it", gomem, limit.String())
			}
			sp := get(ctr, "startupProbe")
			period, _ := get(sp, "periodSeconds").(int)
			fails, _ := get(sp, "failureThreshold").(int)
			if str(get(sp, "httpGet", "path")) != "/healthz" || time.Duration(period*fails)*time.Second < 2*time.Minute {
				t.Errorf("startup probe %v: want /healthz for more than the 1m start-up timeout and the ledger's load", sp)
			}
			zones := false
			for _, c := range list(get(dep, "spec", "template", "spec", "topologySpreadConstraints")) {
				zones = zones || str(get(c, "topologyKey")) == "topology.kubernetes.io/zone"
			}
			if !zones {
				t.Error("the workers are not spread over zones")
			}
			if p := str(get(objs["PodDisruptionBudget/cellttl"], "spec", "unhealthyPodEvictionPolicy")); p != "AlwaysAllow" {
				t.Errorf("PDB unhealthyPodEvictionPolicy %q: a drain waits on unready pods", p)
			}
		})
	}
}

// goMemLimit reads a GOMEMLIMIT value (a number of bytes, or with the
// runtime's units KiB, MiB, GiB).
func goMemLimit(s string) (int64, bool) {
	m := regexp.MustCompile(`^(\d+)(B|KiB|MiB|GiB)?$`).FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	var n int64
	fmt.Sscan(m[1], &n)
	return n << map[string]int{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m[2]], true
}

// Every pointer into the docs from deploy/ names a file and a section
// that exist. (That the image carries no tenants file, so that a pod
// without its ConfigMap fails rather than running the example's tenants,
// scripts/image's TestReleaseImage checks on the image itself.)
func TestLinks(t *testing.T) {
	ref := regexp.MustCompile(`(README|docs/[a-z/]+\.md|[A-Z]+\.md)(?:,| says| has)?\s*(?:#\s*)?(?:"([^"]+)")?`)
	heading := regexp.MustCompile(`(?m)^#+ (.*)$`)
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".json") {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Comments may wrap a reference over lines.
		flat := regexp.MustCompile(`\n\s*#\s*`).ReplaceAllString(string(text), " ")
		for _, m := range ref.FindAllStringSubmatch(flat, -1) {
			file := m[1]
			if file == "README" {
				file = "README.md"
			}
			doc, err := os.ReadFile(filepath.Join("..", file))
			if err != nil {
				t.Errorf("%s points to %s, which does not exist", path, file)
				continue
			}
			if m[2] == "" {
				continue
			}
			found := false
			for _, h := range heading.FindAllStringSubmatch(string(doc), -1) {
				found = found || strings.EqualFold(strings.ReplaceAll(h[1], "`", ""), strings.ReplaceAll(m[2], "`", ""))
			}
			if !found {
				t.Errorf("%s points to %s, %q: no such section", path, file, m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// KEDA reads the lag with the workers' credentials: the trigger names a
// TriggerAuthentication of the overlay whose username and password are
// the keys of the Secret the workers read theirs from.
func TestKEDAAuthenticatesLikeTheWorkers(t *testing.T) {
	objs := build(t, "k8s/keda")
	trigger := list(get(objs["ScaledObject/cellttl"], "spec", "triggers"))[0]
	ta := objs["TriggerAuthentication/"+str(get(trigger, "authenticationRef", "name"))]
	if ta == nil {
		t.Fatalf("the trigger's authenticationRef %v names no TriggerAuthentication of the overlay", get(trigger, "authenticationRef"))
	}
	refs := map[string]string{}
	for _, r := range list(get(ta, "spec", "secretTargetRef")) {
		refs[str(get(r, "parameter"))] = str(get(r, "name")) + "/" + str(get(r, "key"))
	}
	workers := map[string]string{}
	ctr := list(get(objs["Deployment/cellttl"], "spec", "template", "spec", "containers"))[0]
	for _, e := range list(get(ctr, "env")) {
		if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
			workers[str(get(e, "name"))] = str(get(ref, "name")) + "/" + str(get(ref, "key"))
		}
	}
	for _, v := range list(get(objs["Deployment/cellttl"], "spec", "template", "spec", "volumes")) {
		if sec := get(v, "secret"); sec != nil {
			for _, it := range list(get(sec, "items")) {
				workers["file "+str(get(it, "path"))] = str(get(sec, "secretName")) + "/" + str(get(it, "key"))
			}
		}
	}
	if refs["username"] != workers["CELLTTL_KAFKA_SASL_USERNAME"] || refs["password"] != workers["file password"] || refs["sasl"] == "" {
		t.Errorf("KEDA reads %v; the workers %v: want the same Secret's username and password, and a mechanism", refs, workers)
	}
}
