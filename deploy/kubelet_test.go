package deploy

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// What the kubelet does to a container that a process on this machine can
// do too, when the test runs as root (as CI does): the container runs as
// its pod's user, in a directory it cannot write (its root file system is
// read-only), and the files of its ConfigMap and Secret volumes belong to
// root and the pod's fsGroup, with the kubelet's modes. A Secret the user
// cannot read, or a write outside the volumes that allow it, fails here as
// it would in a cluster. As another user the test runs the containers as
// itself and says so.

// podUser is who a container runs as: the pod's securityContext, the
// container's over it. -1 is unset.
type podUser struct{ uid, gid, fsGroup int }

func userOf(pod, ctr any) podUser {
	id := func(key string) int {
		for _, sc := range []any{get(ctr, "securityContext"), get(pod, "securityContext")} {
			if v, ok := get(sc, key).(int); ok {
				return v
			}
		}
		return -1
	}
	return podUser{uid: id("runAsUser"), gid: id("runAsGroup"), fsGroup: id("fsGroup")}
}

// asPod reports whether the test can run containers as their pod's user.
func asPod() bool { return os.Getuid() == 0 }

// podRoot makes the directory a container's volumes are written under
// and that it runs in: everyone may enter it, no one but root write it.
func podRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pod")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The pod's user must reach it: a TMPDIR under a directory only its
	// owner may enter fails every container with "permission denied".
	if asPod() {
		for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
				t.Fatalf("the pod's user cannot reach %s: %s is %v (set TMPDIR to a directory everyone may enter)", dir, d, fi.Mode().Perm())
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return dir
}

// writeVolumeFile writes a file of a ConfigMap, Secret or projected
// volume as the kubelet does: owned by root, with mode; with an fsGroup,
// the file's group is it and the group may read (the kubelet adds 0440 to
// a read-only volume's files).
func (u podUser) writeVolumeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if u.fsGroup >= 0 {
		mode |= 0o440
		if asPod() {
			if err := os.Chown(path, 0, u.fsGroup); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// fileMode reads a volume's defaultMode or an item's mode (YAML reads
// 0440 as the integer 288); def when unset.
func fileMode(t *testing.T, volume string, m any, def os.FileMode) os.FileMode {
	t.Helper()
	if m == nil {
		return def
	}
	n, err := strconv.ParseUint(fmt.Sprint(m), 10, 32)
	if err != nil || n > 0o777 {
		t.Fatalf("volume %s: mode %v is not a file mode", volume, m)
	}
	return os.FileMode(n)
}

// command is the container's process: bin with its arguments and its
// environment plus extra, in its root, as its pod's user. TMPDIR is the
// root too: a read-only root file system has no writable /tmp.
func (r rendered) command(ctx context.Context, t *testing.T, bin string, extra []string) *exec.Cmd {
	t.Helper()
	// The binary where the pod's user may run it (the test's build lies
	// in a directory only root may enter).
	own := filepath.Join(r.root, "worker")
	if _, err := os.Stat(own); err != nil {
		if err := os.Link(bin, own); err != nil {
			copyFile(t, bin, own)
		}
	}
	cmd := exec.CommandContext(ctx, own, r.args...)
	cmd.Env = append(append(r.env, "TMPDIR="+r.root), extra...)
	cmd.Dir = r.root
	if !asPod() {
		t.Logf("the container runs as this test's user, not its pod's (uid %d): only root may switch", os.Getuid())
		return cmd
	}
	if r.user.uid < 0 {
		t.Fatal("the pod sets no runAsUser: it would run as its image's user")
	}
	cred := &syscall.Credential{Uid: uint32(r.user.uid), Gid: uint32(r.user.uid)}
	if r.user.gid >= 0 {
		cred.Gid = uint32(r.user.gid)
	}
	if r.user.fsGroup >= 0 {
		cred.Groups = []uint32{uint32(r.user.fsGroup)}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
