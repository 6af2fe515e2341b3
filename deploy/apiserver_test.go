package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// The manifests applied to a real Kubernetes API server, as a platform
// team applies them: kubectl apply --server-side, into a namespace that
// enforces Pod Security "restricted". The server is kube-apiserver of
// scripts/services.sh kube-start, with no controllers and no kubelet: it
// validates, defaults, admits and stores, and warns, as a cluster's does.
// The tests of rendered_test.go and kubelet_test.go run the pods; these
// prove the files are accepted.

// fieldManager is the field manager of every apply: one owner, as under
// one GitOps tool, so an upgrade's apply owns what the previous one set.
const fieldManager = "cellttl-deploy-test"

// kubeAPI runs kubectl against the test's API server.
type kubeAPI struct {
	kubectl, kubeconfig, cache string
}

// kubeServer returns the API server of scripts/services.sh kube-start in
// TESTENV_KUBE_DIR, waiting for one still starting: scripts/test.sh starts
// it in the background, and a fresh build of kube-apiserver takes minutes.
// Without one the test says so and skips, unless TESTENV_REQUIRE_KUBE is
// set. KUBECONFIG is never read: a real cluster is never the test's.
func kubeServer(t *testing.T) *kubeAPI {
	t.Helper()
	dir := os.Getenv("TESTENV_KUBE_DIR")
	require := os.Getenv("TESTENV_REQUIRE_KUBE") != ""
	if dir == "" {
		if require {
			t.Fatal("TESTENV_REQUIRE_KUBE is set and TESTENV_KUBE_DIR is not: scripts/test.sh sets both")
		}
		t.Skip(`no Kubernetes API server: eval "$(scripts/services.sh kube-start)" starts one (make test does)`)
	}
	cfg := filepath.Join(dir, "kubeconfig")
	start, logged := time.Now(), false
	for {
		if _, err := os.Stat(cfg); err == nil {
			break
		}
		if b, err := os.ReadFile(filepath.Join(dir, "failed")); err == nil {
			t.Fatalf("the API server did not start: %s", b)
		}
		// Under TESTENV_REQUIRE_KUBE a start may not have begun yet;
		// otherwise only a start under way is worth the wait.
		if !starting(dir) && (!require || time.Since(start) > time.Minute) {
			if require {
				t.Fatalf("no API server is starting in %s (scripts/services.sh kube-start)", dir)
			}
			t.Skipf(`no Kubernetes API server in %s: eval "$(scripts/services.sh kube-start)" starts one`, dir)
		}
		if time.Since(start) > 25*time.Minute {
			t.Fatalf("the API server in %s is not ready after %s", dir, time.Since(start).Round(time.Second))
		}
		if !logged {
			t.Logf("waiting for the API server starting in %s", dir)
			logged = true
		}
		time.Sleep(time.Second)
	}
	if logged {
		t.Logf("the API server was ready after %s of waiting", time.Since(start).Round(time.Second))
	}
	// kubectl's discovery cache: one discovery of the server for the
	// test, not one per call, and not in the user's ~/.kube.
	return &kubeAPI{kubectl: filepath.Join(dir, "kubectl"), kubeconfig: cfg, cache: t.TempDir()}
}

// starting reports whether the kube-start that writes dir is running.
func starting(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "starting.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && syscall.Kill(pid, 0) == nil
}

// run runs kubectl with stdin and returns its output, stdout and stderr
// interleaved as a user sees them.
func (k *kubeAPI) run(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.kubectl, append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cache}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// warningLine is a warning as kubectl prints the server's.
var warningLine = regexp.MustCompile(`(?m)^Warning: .*$`)

// mustApply applies a manifest into ns and fails t on an error or a
// warning, quoting kubectl.
func (k *kubeAPI) mustApply(t *testing.T, ns, what string, manifest []byte) {
	t.Helper()
	out, err := k.run(t, manifest, "apply", "--server-side", "--field-manager", fieldManager, "--warnings-as-errors", "-n", ns, "-f", "-")
	if err != nil || warningLine.MatchString(out) {
		t.Errorf("kubectl apply --server-side of %s (namespace %s): %v\n%s", what, ns, err, out)
	}
}

// namespace makes a namespace of its own for t, enforcing Pod Security
// "restricted" (and warning and auditing by it).
func (k *kubeAPI) namespace(t *testing.T, name string) string {
	t.Helper()
	slug := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(slug) > 45 {
		slug = strings.TrimRight(slug[:45], "-")
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	ns := slug + "-" + hex.EncodeToString(b)
	manifest, _ := json.Marshal(object{"apiVersion": "v1", "kind": "Namespace", "metadata": object{"name": ns, "labels": object{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	}}})
	if out, err := k.run(t, manifest, "apply", "--server-side", "--field-manager", fieldManager, "-f", "-"); err != nil {
		t.Fatalf("namespace %s: %v\n%s", ns, err, out)
	}
	return ns
}

// render returns the manifest of path under root (or path itself, when
// absolute): a kustomization
// directory rendered by kustomize (the version go.mod pins, as build
// renders for the other tests), or a plain file as it is.
func render(t *testing.T, root, path string) []byte {
	t.Helper()
	p := path
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, path)
	}
	if fi, err := os.Stat(p); err != nil {
		t.Fatal(err)
	} else if !fi.IsDir() {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), p)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", p, err)
	}
	b, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// objects decodes a manifest's documents.
func objects(t *testing.T, manifest []byte) []object {
	t.Helper()
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

// withoutUnpublished returns manifest without the objects of an API group
// whose CRDs the server lacks for a reason written in unpublishedCRDs,
// saying which it left out and why; nil when none is left. The namespace
// an overlay sets (google-cloud's) is left out too: each install goes
// into the test's own.
func withoutUnpublished(t *testing.T, manifest []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	n := 0
	for _, o := range objects(t, manifest) {
		group, _, _ := strings.Cut(str(o["apiVersion"]), "/")
		if why, ok := unpublishedCRDs[group]; ok {
			t.Logf("%s %s left out: no CRD on the test's API server: %s", o["kind"], get(o, "metadata", "name"), why)
			continue
		}
		if md, ok := o["metadata"].(object); ok {
			delete(md, "namespace")
		}
		if err := enc.Encode(o); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		return nil // and no stream to close: the encoder has not begun one
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// podTemplates returns the pod templates of the workloads among objs, by
// the workload's kind and name.
func podTemplates(objs []object) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		if tmpl, ok := get(o, "spec", "template").(object); ok && get(tmpl, "spec", "containers") != nil {
			out[str(o["kind"])+"/"+str(get(o, "metadata", "name"))] = tmpl
		}
	}
	return out
}

// baseline is what any service account may do that no binding of the
// manifests gave it: the rules of an account in a namespace that holds
// nothing, read before anything is applied.
var baseline struct {
	once  sync.Once
	rules map[string]bool
	err   error
}

// rights returns the rules the account may use in ns, as the API server's
// authorizer lists them (kubectl auth can-i --list, impersonating it).
func (k *kubeAPI) rights(t *testing.T, ns, account string) (map[string]bool, error) {
	t.Helper()
	out, err := k.run(t, nil, "auth", "can-i", "--list", "-n", ns, "--as", "system:serviceaccount:"+ns+":"+account)
	if err != nil {
		return nil, errors.New(strings.TrimSpace(out))
	}
	rules := map[string]bool{}
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if i > 0 { // the header
			rules[strings.Join(strings.Fields(l), " ")] = true
		}
	}
	return rules, nil
}

// grants returns what account may do in ns beyond an account nobody
// bound: the rules the authorizer gives it that the baseline has not, and
// every binding that names it (or a group each service account of ns is
// in) other than Kubernetes' own defaults. The bindings are read as well
// as the rules because, with no controller manager, the aggregated roles
// (view, edit, admin) are empty here, while a cluster fills them in.
func (k *kubeAPI) grants(t *testing.T, ns, account string) []string {
	t.Helper()
	baseline.once.Do(func() {
		baseline.rules, baseline.err = k.rights(t, "nothing-here", "nobody")
	})
	if baseline.err != nil {
		t.Fatalf("the rights of an account nobody bound: %v", baseline.err)
	}
	rules, err := k.rights(t, ns, account)
	if err != nil {
		t.Fatalf("the rights of %s in %s: %v", account, ns, err)
	}
	var found []string
	for r := range rules {
		if !baseline.rules[r] {
			found = append(found, "may: "+r)
		}
	}
	groups := map[string]bool{"system:serviceaccounts": true, "system:serviceaccounts:" + ns: true, "system:authenticated": true}
	for _, kind := range []string{"rolebindings", "clusterrolebindings"} {
		out, err := k.run(t, nil, "get", kind, "-n", ns, "-o", "json")
		if err != nil {
			t.Fatalf("kubectl get %s -n %s: %v\n%s", kind, ns, err, out)
		}
		var l struct {
			Items []struct {
				Metadata struct {
					Name   string
					Labels map[string]string
				}
				RoleRef  struct{ Kind, Name string }
				Subjects []struct{ Kind, Name, Namespace string }
			}
		}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("kubectl get %s: %v", kind, err)
		}
		for _, b := range l.Items {
			if b.Metadata.Labels["kubernetes.io/bootstrapping"] == "rbac-defaults" {
				continue
			}
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && s.Name == account && (s.Namespace == ns || s.Namespace == "" && kind == "rolebindings") ||
					s.Kind == "User" && s.Name == "system:serviceaccount:"+ns+":"+account || s.Kind == "Group" && groups[s.Name] {
					found = append(found, fmt.Sprintf("bound: %s %s to %s %s", kind, b.Metadata.Name, b.RoleRef.Kind, b.RoleRef.Name))
				}
			}
		}
	}
	slices.Sort(found)
	return found
}

// Every entry of applied is accepted by the API server, in a namespace of
// its own that enforces Pod Security "restricted", with no error and no
// warning; a pod made of each pod template is admitted there (the
// server's dry run: Pod Security's enforcement, and the service account
// it names); and each ServiceAccount applied can do nothing more in the
// namespace than an account nobody bound (the pods call no Kubernetes API:
// their rights are Google IAM roles, docs/security.md).
func TestAcceptedByTheAPIServer(t *testing.T) {
	t.Parallel() // after the package's other tests: it may wait minutes for the server
	k := kubeServer(t)
	// The oracle of the rights check sees a binding when there is one.
	t.Run("a planted binding is seen", func(t *testing.T) {
		t.Parallel()
		ns := k.namespace(t, "planted-binding")
		planted := []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: planted}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: planted}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: planted}
subjects: [{kind: ServiceAccount, name: cellttl-worker}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: planted-view}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: Group, name: system:serviceaccounts:` + ns + `}]
`)
		k.mustApply(t, ns, "planted bindings", planted)
		want := []string{"bound: rolebindings planted to Role planted", "bound: rolebindings planted-view to ClusterRole view", "may: configmaps [] [] [get]"}
		if got := k.grants(t, ns, "cellttl-worker"); !slices.Equal(got, want) {
			t.Errorf("the rights check of cellttl-worker saw %q, want %q", got, want)
		}
		if got := k.grants(t, ns, "cellttl-retention"); !slices.Equal(got, want[1:2]) {
			t.Errorf("the rights check of cellttl-retention saw %q, want %q", got, want[1:2])
		}
	})
	type install struct {
		name  string
		paths func(t *testing.T) []string // relative to deploy/, or absolute
	}
	var installs []install
	for _, paths := range applied {
		installs = append(installs, install{strings.Join(paths, " + "), func(*testing.T) []string { return paths }})
	}
	for _, comps := range composed {
		installs = append(installs, install{"base + " + strings.Join(comps, " + "), func(t *testing.T) []string { return []string{composeDir(t, comps...)} }})
	}
	for _, in := range installs {
		t.Run(in.name, func(t *testing.T) {
			t.Parallel()
			paths := in.paths(t)
			var all []object
			manifests := make([][]byte, len(paths))
			for i, p := range paths {
				manifests[i] = withoutUnpublished(t, render(t, ".", p))
				all = append(all, objects(t, manifests[i])...)
			}
			ns := k.namespace(t, in.name)
			for i, p := range paths {
				if manifests[i] != nil {
					k.mustApply(t, ns, p, manifests[i])
				}
			}
			for workload, tmpl := range podTemplates(all) {
				pod, _ := json.Marshal(object{"apiVersion": "v1", "kind": "Pod",
					"metadata": object{"name": "pod-of-" + strings.ToLower(strings.ReplaceAll(workload, "/", "-")), "labels": get(tmpl, "metadata", "labels")},
					"spec":     get(tmpl, "spec")})
				if out, err := k.run(t, pod, "create", "--dry-run=server", "--warnings-as-errors", "-n", ns, "-f", "-"); err != nil || warningLine.MatchString(out) {
					t.Errorf("a pod of %s's template (server dry run, namespace %s): %v\n%s", workload, ns, err, out)
				}
			}
			accounts := 0
			for _, o := range all {
				if o["kind"] != "ServiceAccount" {
					continue
				}
				accounts++
				sa := str(get(o, "metadata", "name"))
				if found := k.grants(t, ns, sa); len(found) > 0 {
					t.Errorf("ServiceAccount %s has rights an account nobody bound has not (rules as resources, non-resource URLs, names, verbs):\n%s", sa, strings.Join(found, "\n"))
				}
			}
			if accounts == 0 && len(podTemplates(all)) > 0 {
				t.Error("pods and no ServiceAccount: the rights of the pods' accounts went unchecked")
			}
		})
	}
}

// The previous release's manifests, applied, then this tree's over them
// in the same namespace, as an upgrade applies them: this tree's apply
// goes through (immutable fields of Jobs and Deployment selectors, field
// ownership under server-side apply), with no warning, and leaves each of
// its objects as a fresh install of this tree leaves them: a field the
// previous release set and this tree dropped is gone. The previous
// release's own warnings are logged, not failed: its files are released
// and cannot change, and what they say of this tree's files the second
// apply says.
func TestUpgradeFromThePreviousRelease(t *testing.T) {
	t.Parallel() // after the package's other tests: it may wait minutes for the server
	k := kubeServer(t)
	version, old := previousManifests(t)
	for _, u := range upgrades {
		t.Run(strings.Join(u.to, " + "), func(t *testing.T) {
			t.Parallel()
			ns, fresh := k.namespace(t, "upgrade "+strings.Join(u.to, " ")), k.namespace(t, "fresh "+strings.Join(u.to, " "))
			for _, p := range u.from {
				manifest := withoutUnpublished(t, render(t, old, p))
				if manifest == nil {
					continue
				}
				out, err := k.run(t, manifest, "apply", "--server-side", "--field-manager", fieldManager, "-n", ns, "-f", "-")
				if err != nil {
					t.Fatalf("kubectl apply --server-side of %s's %s (namespace %s): %v\n%s", version, p, ns, err, out)
				}
				for _, w := range warningLine.FindAllString(out, -1) {
					t.Logf("%s's %s: %s", version, p, w)
				}
			}
			var manifest []byte
			for _, p := range u.to {
				manifest = append(append(manifest, withoutUnpublished(t, render(t, ".", p))...), "\n---\n"...)
			}
			k.mustApply(t, ns, "this tree's "+strings.Join(u.to, " + ")+" over "+version+"'s", manifest)
			k.mustApply(t, fresh, "this tree's "+strings.Join(u.to, " + "), manifest)
			if t.Failed() {
				return
			}
			upgraded, installed := k.stored(t, ns, manifest), k.stored(t, fresh, manifest)
			for key, want := range installed {
				got, _ := json.MarshalIndent(upgraded[key], "", "  ")
				if w, _ := json.MarshalIndent(want, "", "  "); !bytes.Equal(got, w) {
					t.Errorf("%s after the upgrade from %s differs from a fresh install:\nupgraded: %s\nfresh: %s", key, version, got, w)
				}
			}
		})
	}
}

// stored returns the objects of manifest as the server keeps them in ns,
// by kind and name, without what the server makes anew for each object
// (identity, times, allocated addresses, a Job's generated selector).
func (k *kubeAPI) stored(t *testing.T, ns string, manifest []byte) map[string]any {
	t.Helper()
	out, err := k.run(t, manifest, "get", "-n", ns, "-o", "json", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl get -n %s: %v\n%s", ns, err, out)
	}
	var l struct{ Items []map[string]any }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("kubectl get -n %s: %v\n%s", ns, err, out)
	}
	objs := map[string]any{}
	for _, o := range l.Items {
		md, _ := o["metadata"].(map[string]any)
		for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "namespace"} {
			delete(md, f)
		}
		delete(o, "status")
		if spec, ok := o["spec"].(map[string]any); ok {
			delete(spec, "clusterIP")
			delete(spec, "clusterIPs")
			if o["kind"] == "Job" {
				delete(spec, "selector")
				if labels, ok := get(spec, "template", "metadata", "labels").(map[string]any); ok {
					delete(labels, "controller-uid")
					delete(labels, "batch.kubernetes.io/controller-uid")
				}
			}
		}
		objs[o["kind"].(string)+"/"+md["name"].(string)] = o
	}
	return objs
}

// previousManifests writes deploy/ of the newest release before this one
// (cmd/worker/testdata/release-<version>.tar.gz) into a directory and
// returns its version and that directory.
func previousManifests(t *testing.T) (version, dir string) {
	t.Helper()
	version, archive := testenv.PreviousRelease(t, filepath.Join("..", "cmd", "worker", "testdata"))
	dir = t.TempDir()
	if out, err := exec.Command("tar", "-xzf", archive, "-C", dir, "deploy/k8s").CombinedOutput(); err != nil {
		t.Fatalf("tar -xzf %s: %v\n%s", archive, err, out)
	}
	return version, filepath.Join(dir, "deploy")
}

// The GitOps recipes of deploy/gitops (an Argo CD Application, a Flux
// GitRepository and Kustomization) are accepted by the API server, with
// the CRDs of those projects, into the namespaces they name, with no
// error and no warning.
func TestGitOpsRecipesAccepted(t *testing.T) {
	t.Parallel() // after the package's other tests: it may wait minutes for the server
	k := kubeServer(t)
	files, _ := filepath.Glob(filepath.Join("gitops", "*.yaml"))
	if len(files) < 2 {
		t.Fatalf("deploy/gitops holds %v, want the Argo CD and Flux recipes", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			manifest := render(t, ".", f)
			for _, o := range objects(t, manifest) {
				ns := str(get(o, "metadata", "namespace"))
				if ns == "" {
					t.Fatalf("%s %s names no namespace: a recipe says where it goes", o["kind"], get(o, "metadata", "name"))
				}
				nsObj, _ := json.Marshal(object{"apiVersion": "v1", "kind": "Namespace", "metadata": object{"name": ns}})
				if out, err := k.run(t, nsObj, "apply", "--server-side", "--field-manager", fieldManager, "-f", "-"); err != nil {
					t.Fatalf("namespace %s: %v\n%s", ns, err, out)
				}
			}
			out, err := k.run(t, manifest, "apply", "--server-side", "--field-manager", fieldManager, "--warnings-as-errors", "-f", "-")
			if err != nil || warningLine.MatchString(out) {
				t.Errorf("kubectl apply --server-side of %s: %v\n%s", f, err, out)
			}
		})
	}
}
