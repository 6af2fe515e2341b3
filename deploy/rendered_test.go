package deploy

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cellttl/cellttl/testkit/lab"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Every overlay, rendered, runs as a cluster would run it, against the
// suite's Kafka and Bigtable: the setup Job's container, then the
// Deployment's, each with its own arguments, its environment (ConfigMaps,
// Secrets, resource fields) and its volumes written where it mounts them.
// Only what a cluster has and this machine has not is replaced: where
// Kafka and Bigtable are, and names of the test's own. Setup exits 0; the
// worker gets ready, writes an event of a tenant of the mounted tenants
// file, and stops cleanly on SIGTERM.
func TestOverlaysRunAsRendered(t *testing.T) {
	bin := testenv.WorkerBinary(t)
	brokers := testenv.Kafka(t)
	emulator := testenv.Bigtable(t)
	dc, _ := testenv.Clients(t)
	type runCase struct {
		name        string
		render      func(*testing.T) map[string]object
		tenant      string // a tenant of its tenants file, whose event it writes
		kafkaSecret bool   // the Secret cellttl-kafka made, against the SASL listener
		retime      bool   // then the retime Job's pods
		offboard    bool   // then the offboard Job's pod
	}
	var cases []runCase
	for _, overlay := range runHere {
		// initech is only in the tenants-dir example's second ConfigMap:
		// its row says the whole directory is mounted.
		tenant := map[bool]string{true: "initech", false: "acme"}[overlay == "k8s/examples/tenants-dir"]
		cases = append(cases, runCase{name: overlay, render: func(t *testing.T) map[string]object { return build(t, overlay) }, tenant: tenant})
	}
	cases = append(cases,
		runCase{name: "k8s/examples/quickstart with the Kafka Secret", render: func(t *testing.T) map[string]object { return build(t, "k8s/examples/quickstart") }, tenant: "acme", kafkaSecret: true},
		runCase{name: "hpa+network+retime+offboard", render: func(t *testing.T) map[string]object { return compose(t, "hpa", "network", "retime", "offboard") }, tenant: "acme", retime: true, offboard: true},
		runCase{name: "keda+tenants-dir+retime", render: func(t *testing.T) map[string]object { return compose(t, "keda", "tenants-dir", "retime") }, tenant: "acme", retime: true})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := c.render(t)
			admin, err := lab.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			site := map[string]string{
				"CELLTTL_BROKERS": strings.Join(brokers, ","), "CELLTTL_TOPIC": testenv.Name("clicks"),
				"CELLTTL_GROUP": testenv.Name("group"), "CELLTTL_TABLE": testenv.Name("table"), "CELLTTL_ADMIN_ADDR": admin,
				// The emulator keeps tables by project and instance: the
				// test's client reads those of testenv.Clients.
				"CELLTTL_PROJECT": "local", "CELLTTL_INSTANCE": "local",
			}
			if c.kafkaSecret {
				sasl := os.Getenv("TESTENV_SASL_BROKERS")
				if sasl == "" {
					t.Skip("needs the SASL listener of scripts/services.sh (make test starts it)")
				}
				secret := kafkaSecret(t, os.Getenv("TESTENV_SASL_USERNAME"), os.Getenv("TESTENV_SASL_PASSWORD"))
				objs["Secret/cellttl-kafka"] = secret
				// KEDA's scaler reads the same Secret: every key it
				// names is one the docs' command makes.
				refs := 0
				for _, ref := range list(get(build(t, "k8s/keda")["TriggerAuthentication/cellttl-kafka"], "spec", "secretTargetRef")) {
					if str(get(ref, "name")) != "cellttl-kafka" {
						continue
					}
					refs++
					if get(secret, "data", str(get(ref, "key"))) == nil {
						t.Errorf("KEDA's TriggerAuthentication reads key %s of cellttl-kafka, which the docs' command does not make", str(get(ref, "key")))
					}
				}
				if refs == 0 {
					t.Error("KEDA's TriggerAuthentication cellttl-kafka reads nothing of the Secret cellttl-kafka")
				}
				// KEDA names the mechanism its own way.
				data := dataOf(t, "Secret", secret)
				if want := map[string]string{"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}[data["mechanism"]]; data["keda-sasl"] != want {
					t.Errorf("the docs' command gives mechanism %s and keda-sasl %s, which KEDA reads as another (want %s)", data["mechanism"], data["keda-sasl"], want)
				}
				site["CELLTTL_BROKERS"] = sasl
			}
			testenv.CreateTopic(t, brokers, site["CELLTTL_TOPIC"], 3)
			extra := []string{"BIGTABLE_EMULATOR_HOST=" + emulator, "PATH=" + os.Getenv("PATH")}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			setup := container(t, objs, get(setupJob(t, objs), "spec", "template", "spec"), site)
			cmd := setup.command(ctx, t, bin, extra)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the setup Job's container (worker %s) failed: %v\n%s", strings.Join(setup.args, " "), err, out)
			}

			run := container(t, objs, get(objs["Deployment/cellttl"], "spec", "template", "spec"), site)
			logs := &testenv.Buffer{}
			cmd = run.command(context.Background(), t, bin, extra)
			cmd.Stdout, cmd.Stderr = logs, logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				_ = cmd.Process.Kill()
				<-done
				if t.Failed() {
					t.Logf("the worker's log:\n%s", logs.String())
				}
			}()
			testenv.Eventually(t, time.Minute, func() (bool, string) {
				res, err := http.Get("http://" + admin + "/readyz")
				if err != nil {
					return false, err.Error()
				}
				res.Body.Close()
				return res.StatusCode == 200, fmt.Sprintf("/readyz %d", res.StatusCode)
			})
			tenant := c.tenant
			testenv.Produce(t, brokers, site["CELLTTL_TOPIC"], []byte(`{"event_id":"e-1","tenant_id":"`+tenant+`"}`))
			testenv.Eventually(t, 30*time.Second, func() (bool, string) {
				n := 0
				err := dc.Open(site["CELLTTL_TABLE"]).ReadRows(ctx, bigtable.PrefixRange(tenant+"#"), func(bigtable.Row) bool { n++; return true })
				return err == nil && n == 1, fmt.Sprintf("%d rows of %s, %v", n, tenant, err)
			})
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				done <- err // for the deferred wait
				if err != nil {
					t.Errorf("the worker's exit after SIGTERM: %v", err)
				}
			case <-time.After(45 * time.Second):
				t.Error("the worker did not stop within the pod's grace period after SIGTERM")
			}
			if c.retime {
				retimeAsRendered(t, bin, objs, site, extra, tenant)
			}
			if c.offboard {
				offboardAsRendered(t, bin, objs, site, extra, tenant)
			}
		})
	}
}

// retimeAsRendered runs the retime Job's pods as rendered, each with its
// completion index, over the table the worker wrote (with the overlay's
// ConfigMaps, which the Job shares with the workers): each exits 0, and
// the tenant's row is still there.
func retimeAsRendered(t *testing.T, bin string, objs map[string]object, site map[string]string, extra []string, tenant string) {
	t.Helper()
	job := objs["Job/cellttl-retime"]
	n, _ := get(job, "spec", "completions").(int)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		shard := map[string]string{"SHARD_INDEX": fmt.Sprint(i)}
		for k, v := range site {
			shard[k] = v
		}
		r := container(t, objs, get(job, "spec", "template", "spec"), shard)
		cmd := r.command(ctx, t, bin, extra)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the retime Job's pod %d (worker %s) failed: %v\n%s", i, strings.Join(r.args, " "), err, out)
		}
	}
	dc, _ := testenv.Clients(t)
	rows := 0
	err := dc.Open(site["CELLTTL_TABLE"]).ReadRows(ctx, bigtable.PrefixRange(tenant+"#"), func(bigtable.Row) bool { rows++; return true })
	if err != nil || rows != 1 {
		t.Errorf("after the retime Job: %d rows of %s (%v), want 1", rows, tenant, err)
	}
}

// offboardAsRendered runs the offboard Job's pod as rendered, with the
// workers' bound shortened (the second pass waits it): it exits 0 with
// its receipt, and no row of the tenant is left.
func offboardAsRendered(t *testing.T, bin string, objs map[string]object, site map[string]string, extra []string, tenant string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := container(t, objs, get(objs["Job/cellttl-offboard"], "spec", "template", "spec"), site)
	cmd := r.command(ctx, t, bin, append(extra, "CELLTTL_ERASURE_REFRESH=100ms", "CELLTTL_WRITE_TIMEOUT=1s"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "offboarded tenant "+tenant) {
		t.Fatalf("the offboard Job's pod (worker %s): %v\n%s", strings.Join(r.args, " "), err, out)
	}
	dc, _ := testenv.Clients(t)
	rows := 0
	err = dc.Open(site["CELLTTL_TABLE"]).ReadRows(ctx, bigtable.PrefixRange(tenant+"#"), func(bigtable.Row) bool { rows++; return true })
	if err != nil || rows != 0 {
		t.Errorf("after the offboard Job: %d rows of %s (%v), want none", rows, tenant, err)
	}
}

// rendered is a container as its pod would run it.
type rendered struct {
	args []string
	env  []string // NAME=value, sorted
	root string   // its volumes, and the directory it runs in
	user podUser
}

// container renders the first container of pod: its volumes written into
// a directory of the test, every path under a mount moved there, its
// environment resolved, and site's values in place of the cluster's.
func container(t *testing.T, objs map[string]object, pod any, site map[string]string) rendered {
	t.Helper()
	ctr := list(get(pod, "containers"))[0]
	out := rendered{root: podRoot(t), user: userOf(pod, ctr)}
	vols := map[string]string{} // volume name -> directory
	for _, v := range list(get(pod, "volumes")) {
		name := str(get(v, "name"))
		dir := filepath.Join(out.root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		vols[name] = dir
		var sources []any
		switch {
		case get(v, "emptyDir") != nil:
			// The kubelet makes it writable by any user of the pod.
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			continue
		case get(v, "configMap") != nil:
			sources = []any{object{"configMap": get(v, "configMap")}}
		case get(v, "secret") != nil:
			sources = []any{object{"secret": get(v, "secret")}}
		default:
			sources = list(get(v, "projected", "sources"))
		}
		for _, src := range sources {
			kind, ref := "ConfigMap", get(src, "configMap")
			if ref == nil {
				kind, ref = "Secret", get(src, "secret")
			}
			nameKey := "name"
			if kind == "Secret" && get(ref, "secretName") != nil {
				nameKey = "secretName"
			}
			o := objs[kind+"/"+str(get(ref, nameKey))]
			if o == nil {
				if get(ref, "optional") != true {
					t.Fatalf("volume %s mounts %s %s, which the overlay does not have", name, kind, str(get(ref, nameKey)))
				}
				continue // an optional Secret the user has not made: an empty directory
			}
			files := dataOf(t, kind, o)
			defaultMode := fileMode(t, name, get(v, kind2field[kind], "defaultMode"), 0o644)
			type file struct {
				path string
				mode os.FileMode
			}
			paths := map[string]file{} // key -> file; every key without items
			for key := range files {
				paths[key] = file{key, defaultMode}
			}
			if items := list(get(ref, "items")); items != nil {
				paths = map[string]file{}
				for _, it := range items {
					paths[str(get(it, "key"))] = file{str(get(it, "path")), fileMode(t, name, get(it, "mode"), defaultMode)}
				}
			}
			for key, f := range paths {
				data, ok := files[key]
				if !ok {
					t.Fatalf("volume %s mounts key %s of %s %s, which has no such key", name, key, kind, str(get(ref, nameKey)))
				}
				out.user.writeVolumeFile(t, filepath.Join(dir, f.path), []byte(data), f.mode)
			}
		}
	}
	mounts := map[string]string{} // mount path -> directory
	for _, m := range list(get(ctr, "volumeMounts")) {
		mounts[str(get(m, "mountPath"))] = vols[str(get(m, "name"))]
	}
	local := func(s string) string {
		best := ""
		for p := range mounts {
			if (s == p || strings.HasPrefix(s, p+"/")) && len(p) > len(best) {
				best = p
			}
		}
		if best == "" {
			return s
		}
		return mounts[best] + strings.TrimPrefix(s, best)
	}
	env := map[string]string{}
	for _, ef := range list(get(ctr, "envFrom")) {
		name := str(get(ef, "configMapRef", "name"))
		cm := objs["ConfigMap/"+name]
		if cm == nil {
			t.Fatalf("envFrom ConfigMap %s, which the overlay does not have", name)
		}
		for k, v := range get(cm, "data").(object) {
			env[k] = str(v)
		}
	}
	for _, e := range list(get(ctr, "env")) {
		name := str(get(e, "name"))
		switch from := get(e, "valueFrom"); {
		case from == nil:
			env[name] = str(get(e, "value"))
		case get(from, "secretKeyRef") != nil:
			ref := get(from, "secretKeyRef")
			s := objs["Secret/"+str(get(ref, "name"))]
			if s == nil && get(ref, "optional") != true {
				t.Fatalf("env %s from Secret %s, which the overlay does not have", name, str(get(ref, "name")))
			}
			if v, ok := dataOf(t, "Secret", s)[str(get(ref, "key"))]; ok {
				env[name] = v
			}
		case get(from, "configMapKeyRef") != nil:
			ref := get(from, "configMapKeyRef")
			env[name] = str(get(objs["ConfigMap/"+str(get(ref, "name"))], "data", str(get(ref, "key"))))
		case get(from, "resourceFieldRef") != nil:
			kind, res, _ := strings.Cut(str(get(from, "resourceFieldRef", "resource")), ".") // limits.memory
			q := resource.MustParse(str(get(ctr, "resources", kind, res)))
			env[name] = fmt.Sprint(q.Value())
		case get(from, "fieldRef") != nil:
			env[name] = "" // the pod's own field: site gives it
		default:
			t.Fatalf("env %s: a source the test does not render: %v", name, from)
		}
	}
	for k, v := range site {
		if _, ok := env[k]; !ok {
			t.Fatalf("the container does not set %s, which a cluster sets to its own", k)
		}
		env[k] = v
	}
	for k, v := range env {
		out.env = append(out.env, k+"="+local(v))
	}
	sort.Strings(out.env)
	for _, a := range toStrings(get(ctr, "args")) {
		// $(NAME) is the container's variable, as the kubelet expands it.
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if name, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
			a = name + "=" + local(value)
		}
		out.args = append(out.args, local(a))
	}
	return out
}

// kind2field names the field of a volume of each kind of source.
var kind2field = map[string]string{"ConfigMap": "configMap", "Secret": "secret"}

// dataOf returns the data of a ConfigMap or a Secret (base64 in data,
// plain in stringData, as the API takes them) by key; nothing for nil.
func dataOf(t *testing.T, kind string, o object) map[string]string {
	t.Helper()
	out := map[string]string{}
	data, _ := get(o, "data").(object)
	for k, v := range data {
		out[k] = str(v)
		if kind == "Secret" {
			b, err := base64.StdEncoding.DecodeString(str(v))
			if err != nil {
				t.Fatalf("Secret data %s: not base64: %v", k, err)
			}
			out[k] = string(b)
		}
	}
	sd, _ := get(o, "stringData").(object)
	for k, v := range sd {
		out[k] = str(v)
	}
	return out
}

// kafkaSecret makes the Secret cellttl-kafka as docs/operations.md tells a
// user to, with its kubectl command: the keys it names, the mechanism it
// gives, and the suite's user name and password (the password file as
// --from-file reads it, with its newline).
func kafkaSecret(t *testing.T, user, password string) object {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "kubectl create secret generic cellttl-kafka"
	_, rest, ok := strings.Cut(string(doc), cmd)
	if !ok {
		t.Fatalf("docs/operations.md has no %q command", cmd)
	}
	var line string
	for l := range strings.Lines(rest) {
		line += l
		if !strings.HasSuffix(strings.TrimSpace(l), "\\") {
			break
		}
	}
	data := object{}
	for _, f := range strings.Fields(line) {
		for _, p := range []string{"--from-literal=", "--from-file="} {
			if kv, ok := strings.CutPrefix(f, p); ok {
				k, v, _ := strings.Cut(kv, "=")
				if p == "--from-file=" {
					v = password + "\n"
				}
				data[k] = base64.StdEncoding.EncodeToString([]byte(v))
			}
		}
	}
	for _, k := range []string{"mechanism", "username", "password"} {
		if data[k] == nil {
			t.Fatalf("the docs' %s command gives no %s: %s", cmd, k, line)
		}
	}
	data["username"] = base64.StdEncoding.EncodeToString([]byte(user))
	return object{"kind": "Secret", "data": data}
}

// The overlays whose tenants file is the base's placeholder run no
// tenant's TTL: their setup Job's container, as rendered, refuses the
// file and says why, before it touches the table.
func TestPlaceholderTenantsRefused(t *testing.T) {
	bin := testenv.WorkerBinary(t)
	emulator := testenv.Bigtable(t)
	for _, overlay := range placeholders {
		t.Run(overlay, func(t *testing.T) {
			objs := build(t, overlay)
			site := map[string]string{"CELLTTL_TABLE": testenv.Name("table"), "CELLTTL_PROJECT": "local", "CELLTTL_INSTANCE": "local"}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			setup := container(t, objs, get(setupJob(t, objs), "spec", "template", "spec"), site)
			out, err := setup.command(ctx, t, bin, []string{"BIGTABLE_EMULATOR_HOST=" + emulator, "PATH=" + os.Getenv("PATH")}).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "nothing but comments") {
				t.Errorf("the setup Job's container with the placeholder tenants: %v\n%s", err, out)
			}
		})
	}
}
