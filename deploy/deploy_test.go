// Package deploy holds the container, Kubernetes and compose files; its
// test checks them against the worker they run.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/release"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/lab"
)

// cli is what the worker accepts, read from its own --help.
type cli struct {
	commands map[string]map[string]bool // command -> flags
	env      map[string]bool
}

func workerCLI(t *testing.T) cli {
	t.Helper()
	// This checkout's worker, whatever TESTENV_WORKER_BIN says: the
	// manifests here are checked against the worker built beside them.
	bin, err := lab.Build(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := cli{commands: map[string]map[string]bool{}, env: map[string]bool{}}
	flagRe, envRe := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`), regexp.MustCompile(`\(env ([A-Z0-9_]+)\)`)
	for _, cmd := range []string{"run", "setup", "check", "read", "retime", "forget", "offboard", "audit"} {
		var out bytes.Buffer
		h := exec.Command(bin, cmd, "--help")
		h.Stdout, h.Stderr = &out, &out
		if err := h.Run(); err != nil {
			t.Fatalf("worker %s --help: %v\n%s", cmd, err, out.String())
		}
		c.commands[cmd] = map[string]bool{}
		for _, m := range flagRe.FindAllStringSubmatch(out.String(), -1) {
			c.commands[cmd][m[1]] = true
		}
		for _, m := range envRe.FindAllStringSubmatch(out.String(), -1) {
			c.env[m[1]] = true
		}
	}
	if !c.commands["run"]["brokers"] || !c.env["CELLTTL_BROKERS"] {
		t.Fatalf("could not read the worker's flags: %+v", c)
	}
	return c
}

// runtimeEnv are variables read by libraries and the Go runtime, not flags.
var runtimeEnv = map[string]bool{
	"BIGTABLE_EMULATOR_HOST": true, "GOOGLE_APPLICATION_CREDENTIALS": true, "GOMEMLIMIT": true, "GOMAXPROCS": true,
}

func (c cli) checkEnv(t *testing.T, where, name string) {
	t.Helper()
	if !c.env[name] && !runtimeEnv[name] && !strings.HasPrefix(name, "OTEL_") {
		t.Errorf("%s: env %s is not read by the worker", where, name)
	}
}

func (c cli) checkArgs(t *testing.T, where string, args []string) string {
	t.Helper()
	if len(args) == 0 {
		return "run"
	}
	cmd := args[0]
	flags, ok := c.commands[cmd]
	if !ok {
		t.Errorf("%s: unknown command %q", where, cmd)
		return cmd
	}
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.SplitN(strings.TrimLeft(a, "-"), "=", 2)[0]
		if !flags[name] {
			t.Errorf("%s: worker %s has no flag --%s", where, cmd, name)
		}
	}
	return cmd
}

type object = map[string]any

func get(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(object)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

func list(o any) []any {
	l, _ := o.([]any)
	return l
}

func str(o any) string {
	s, _ := o.(string)
	return s
}

// build renders an overlay with kustomize, the real validator of its
// structure, and returns its objects by kind and name.
func build(t *testing.T, dir string) map[string]object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := map[string]object{}
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out[r.GetKind()+"/"+r.GetName()] = m
	}
	return out
}

func TestKubernetes(t *testing.T) {
	c := workerCLI(t)
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			objs := build(t, overlay)
			env := map[string]string{}
			cm := objs[envConfigMap(t, objs)]
			for k, v := range get(cm, "data").(object) {
				c.checkEnv(t, "ConfigMap cellttl-env", k)
				env[k] = str(v)
			}
			dep := objs["Deployment/cellttl"]
			if dep == nil {
				t.Fatal("no Deployment cellttl")
			}
			pod := get(dep, "spec", "template", "spec")
			containers := list(get(pod, "containers"))
			if len(containers) != 1 {
				t.Fatalf("%d containers", len(containers))
			}
			ctr := containers[0].(object)
			c.checkArgs(t, "Deployment", toStrings(get(ctr, "args")))
			for _, e := range list(get(ctr, "env")) {
				c.checkEnv(t, "Deployment", str(get(e, "name")))
			}

			// Probes hit the admin server's paths on its port.
			addr := env["CELLTTL_ADMIN_ADDR"]
			var adminPort int
			for _, p := range list(get(ctr, "ports")) {
				if str(get(p, "name")) == "admin" {
					adminPort = get(p, "containerPort").(int)
				}
			}
			if adminPort == 0 || !strings.HasSuffix(addr, fmt.Sprintf(":%d", adminPort)) {
				t.Errorf("admin port %d, CELLTTL_ADMIN_ADDR %q", adminPort, addr)
			}
			for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
				if p := get(ctr, probe, "httpGet"); str(get(p, "path")) != path || str(get(p, "port")) != "admin" {
					t.Errorf("%s: %v, want %s on port admin", probe, p, path)
				}
			}

			// The grace period covers the drain.
			drain, err := duration.Parse(env["CELLTTL_DRAIN_TIMEOUT"])
			if err != nil {
				t.Fatalf("CELLTTL_DRAIN_TIMEOUT: %v", err)
			}
			grace := time.Duration(get(pod, "terminationGracePeriodSeconds").(int)) * time.Second
			if grace <= drain {
				t.Errorf("terminationGracePeriodSeconds %s does not exceed CELLTTL_DRAIN_TIMEOUT %s", grace, drain)
			}

			// Rollouts: a pod goes only once its replacement is ready, in
			// batches, not one at a time (each join and leave rebalances
			// the group).
			ru := get(dep, "spec", "strategy", "rollingUpdate")
			if str(get(dep, "spec", "strategy", "type")) != "RollingUpdate" || fmt.Sprint(get(ru, "maxUnavailable")) != "0" ||
				fmt.Sprint(get(ru, "maxSurge")) == "1" || get(dep, "spec", "minReadySeconds") == nil {
				t.Errorf("rollout strategy %v, minReadySeconds %v: want batches, none unavailable, a settle time", get(dep, "spec", "strategy"), get(dep, "spec", "minReadySeconds"))
			}

			// tenants.yaml comes from a ConfigMap mounted as a directory (a
			// subPath mount never sees updates), is valid, and is the repo's.
			var mountPath string
			for _, m := range list(get(ctr, "volumeMounts")) {
				if str(get(m, "name")) == "tenants" {
					mountPath = str(get(m, "mountPath"))
					if get(m, "subPath") != nil {
						t.Error("tenants mounted with subPath: edits would never reach the pod")
					}
				}
			}
			if p := env["CELLTTL_TENANTS"]; p != mountPath && filepath.Dir(p) != mountPath {
				t.Errorf("CELLTTL_TENANTS %s is not the tenants mount %s, nor in it", p, mountPath)
			}
			tcm := objs["ConfigMap/cellttl-tenants"]
			if tcm == nil {
				t.Fatal("no ConfigMap cellttl-tenants (a hashed name would roll the pods on every edit)")
			}
			// The examples run their tenants, the quickstart the
			// repository's; every other overlay the base's placeholder,
			// which the worker refuses.
			for key, data := range get(tcm, "data").(object) {
				_, err := tenants.Parse([]byte(str(data)))
				switch {
				case !slices.Contains(examples, overlay):
					if base, _ := os.ReadFile("k8s/base/tenants.yaml"); str(data) != string(base) || err == nil {
						t.Errorf("%s of cellttl-tenants: not the base's placeholder, or one the worker takes (%v)", key, err)
					}
				case err != nil:
					t.Errorf("the example's tenants, %s: %v", key, err)
				}
			}
			if overlay == "k8s/examples/quickstart" {
				repo, _ := os.ReadFile("../tenants.yaml")
				if data := str(get(tcm, "data", "tenants.yaml")); data != string(repo) {
					t.Error("deploy/k8s/examples/quickstart/tenants.yaml differs from the repository's tenants.yaml")
				}
			}

			// Read-only root, non-root.
			if get(ctr, "securityContext", "readOnlyRootFilesystem") != true || get(pod, "securityContext", "runAsNonRoot") != true {
				t.Error("the worker must run as non-root with a read-only root file system")
			}

			// The metrics Service and the PDB select the worker pods.
			labels := get(dep, "spec", "template", "metadata", "labels").(object)
			for _, name := range []string{"Service/cellttl-metrics", "PodDisruptionBudget/cellttl"} {
				sel := get(objs[name], "spec", "selector")
				if name != "Service/cellttl-metrics" {
					sel = get(sel, "matchLabels")
				}
				for k, v := range sel.(object) {
					if labels[k] != v {
						t.Errorf("%s selects %s=%v, pods have %v", name, k, v, labels[k])
					}
				}
			}
			svcPort := list(get(objs["Service/cellttl-metrics"], "spec", "ports"))[0]
			if str(get(svcPort, "targetPort")) != "admin" {
				t.Errorf("metrics Service targets %v", get(svcPort, "targetPort"))
			}

			// The setup Job runs worker setup with known flags and env.
			job := setupJob(t, objs)
			jc := list(get(job, "spec", "template", "spec", "containers"))[0]
			if c.checkArgs(t, "setup Job", toStrings(get(jc, "args"))) != "setup" {
				t.Error("the setup Job does not run worker setup")
			}
			for _, e := range list(get(jc, "env")) {
				c.checkEnv(t, "setup Job", str(get(e, "name")))
			}

			// Autoscaling targets the Deployment.
			for name, o := range objs {
				if strings.HasPrefix(name, "ScaledObject/") || strings.HasPrefix(name, "HorizontalPodAutoscaler/") {
					if str(get(o, "spec", "scaleTargetRef", "name")) != "cellttl" {
						t.Errorf("%s scales %v", name, get(o, "spec", "scaleTargetRef"))
					}
					if n := get(o, "spec", "triggers"); n != nil && str(get(list(n)[0], "type")) == "kafka" {
						md := get(list(n)[0], "metadata")
						if str(get(md, "consumerGroupFromEnv")) != "CELLTTL_GROUP" || str(get(md, "topicFromEnv")) != "CELLTTL_TOPIC" || str(get(md, "bootstrapServersFromEnv")) != "CELLTTL_BROKERS" {
							t.Errorf("KEDA trigger %v does not read the worker's brokers, group and topic from its environment", md)
						}
						// KEDA counts lag to the high watermark: behind an open
						// transaction the workers hold at the last stable offset,
						// and that lag no added worker can read.
						if str(get(md, "excludePersistentLag")) != "true" {
							t.Errorf("KEDA trigger %v counts lag held by an open transaction: set excludePersistentLag: \"true\"", md)
						}
					}
				}
			}
		})
	}
}

func toStrings(o any) []string {
	var out []string
	for _, v := range list(o) {
		out = append(out, str(v))
	}
	return out
}

func TestCompose(t *testing.T) {
	c := workerCLI(t)
	data, err := os.ReadFile("docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc object
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	for _, svc := range []string{"setup", "worker"} {
		s := get(doc, "services", svc)
		if s == nil {
			t.Fatalf("no %s service", svc)
		}
		// The release's image, as the manifests run it: built by
		// scripts/release.sh, loaded from its image.tar between releases.
		if img := str(get(s, "image")); img != "ghcr.io/cellttl/cellttl:"+release.Version || get(s, "build") != nil {
			t.Errorf("compose %s runs image %q (build %v), want ghcr.io/cellttl/cellttl:%s", svc, img, get(s, "build"), release.Version)
		}
		cmd := c.checkArgs(t, "compose "+svc, toStrings(get(s, "command")))
		if cmd != svc && !(svc == "worker" && cmd == "run") {
			t.Errorf("compose %s runs worker %s", svc, cmd)
		}
		env := get(s, "environment").(object)
		for k := range env {
			c.checkEnv(t, "compose "+svc, k)
		}
		if svc == "worker" {
			drain, _ := duration.Parse(str(env["CELLTTL_DRAIN_TIMEOUT"]))
			grace, _ := duration.Parse(str(get(s, "stop_grace_period")))
			if grace <= drain {
				t.Errorf("compose stop_grace_period %s does not exceed CELLTTL_DRAIN_TIMEOUT %s", grace, drain)
			}
			if !strings.HasSuffix(str(env["CELLTTL_ADMIN_ADDR"]), ":8080") {
				t.Errorf("compose CELLTTL_ADMIN_ADDR %v", env["CELLTTL_ADMIN_ADDR"])
			}
		}
	}
	prom, _ := os.ReadFile("prometheus.yml")
	if !strings.Contains(string(prom), "worker:8080") {
		t.Error("prometheus.yml does not scrape worker:8080")
	}
}

// retimeJob renders the retime Job: its Component on the base.
func retimeJob(t *testing.T) object {
	t.Helper()
	job := compose(t, "retime")["Job/cellttl-retime"]
	if job == nil {
		t.Fatal("the retime Component renders no Job cellttl-retime")
	}
	return job
}

// The retime Job is Indexed, each pod takes the shard of its completion
// index out of as many as there are completions, with flags the worker has.
func TestRetimeJob(t *testing.T) {
	c := workerCLI(t)
	job := retimeJob(t)
	spec := get(job, "spec")
	n, _ := get(spec, "completions").(int)
	if str(get(spec, "completionMode")) != "Indexed" || n < 1 || get(spec, "parallelism") != n {
		t.Fatalf("job spec %v: want Indexed, parallelism == completions", spec)
	}
	ctr := list(get(spec, "template", "spec", "containers"))[0]
	args := toStrings(get(ctr, "args"))
	if c.checkArgs(t, "retime Job", args) != "retime" {
		t.Errorf("args %v: not worker retime", args)
	}
	if !slices.Contains(args, fmt.Sprintf("--shard=$(SHARD_INDEX)/%d", n)) {
		t.Errorf("args %v: no --shard=$(SHARD_INDEX)/%d", args, n)
	}
	var index bool
	for _, e := range list(get(ctr, "env")) {
		if str(get(e, "name")) == "SHARD_INDEX" {
			index = str(get(e, "valueFrom", "fieldRef", "fieldPath")) == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
		}
	}
	if !index {
		t.Error("SHARD_INDEX does not come from the completion index")
	}
}

// offboardJob renders the offboard Job: its Component on the base.
func offboardJob(t *testing.T) object {
	t.Helper()
	job := compose(t, "offboard")["Job/cellttl-offboard"]
	if job == nil {
		t.Fatal("the offboard Component renders no Job cellttl-offboard")
	}
	return job
}

// The offboard Job runs worker offboard with flags the worker has, as the
// retention identity (the workers' may not write the ledger), and says
// who asked.
func TestOffboardJob(t *testing.T) {
	c := workerCLI(t)
	pod := get(offboardJob(t), "spec", "template", "spec")
	if sa := str(get(pod, "serviceAccountName")); sa != "cellttl-retention" {
		t.Errorf("the offboard Job runs as %s, want cellttl-retention", sa)
	}
	args := toStrings(get(list(get(pod, "containers"))[0], "args"))
	if c.checkArgs(t, "offboard Job", args) != "offboard" {
		t.Errorf("args %v: not worker offboard", args)
	}
	for _, want := range []string{"--tenant=", "--requested-by="} {
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, want) }) {
			t.Errorf("args %v: no %s", args, want)
		}
	}
}

// The tenants-dir example ships several ConfigMaps projected into one
// directory, and points --tenants at it: the files it mounts read as one
// valid tenants config, the worker's own loader says so.
func TestTenantsDirectoryOverlay(t *testing.T) {
	objs := build(t, "k8s/examples/tenants-dir")
	dep := objs["Deployment/cellttl"]
	pod := get(dep, "spec", "template", "spec")
	vol := list(get(pod, "volumes"))[0]
	if str(get(vol, "name")) != "tenants" {
		t.Fatalf("volume 0 is %v, want tenants", vol)
	}
	ctr := list(get(pod, "containers"))[0]
	mount := ""
	for _, m := range list(get(ctr, "volumeMounts")) {
		if str(get(m, "name")) == "tenants" {
			mount = str(get(m, "mountPath"))
		}
	}
	env := get(objs[envConfigMap(t, objs)], "data")
	if p := str(get(env, "CELLTTL_TENANTS")); p != mount || mount == "" {
		t.Errorf("CELLTTL_TENANTS %q, the tenants mounted at %q", p, mount)
	}
	dir := t.TempDir()
	sources := list(get(vol, "projected", "sources"))
	if len(sources) < 2 {
		t.Fatalf("projected sources %v, want several ConfigMaps", sources)
	}
	for _, s := range sources {
		name := str(get(s, "configMap", "name"))
		cm := objs["ConfigMap/"+name]
		if cm == nil {
			if get(s, "configMap", "optional") == true {
				continue // a ConfigMap of the directory this example does not need
			}
			t.Fatalf("ConfigMap %s is projected but not in the overlay", name)
		}
		for file, data := range get(cm, "data").(object) {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(str(data)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg, err := tenants.Load(dir)
	if err != nil {
		t.Fatalf("the projected directory: %v", err)
	}
	if len(cfg.Policy.Tenants) != 5 || !cfg.Labelled("acme") || cfg.Labelled("hooli") {
		t.Errorf("tenants %v", cfg.Policy.Tenants)
	}
}
