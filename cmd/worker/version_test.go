package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellttl/cellttl/internal/release"
)

// A build in a checkout names its version and the commit it was built
// from, with -modified when the tree has uncommitted changes: what a user
// pins and what a bug report quotes. The version is the tree's (a -dev
// one between releases: internal/release's TestVersionNamesOneBuild).
func TestVersionNamesTheCommit(t *testing.T) {
	t.Parallel()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): a build here records no commit", err)
	}
	// A git worktree's .git is a file, and Go records no commit there.
	if dir, _ := exec.Command("git", "rev-parse", "--git-dir").Output(); !strings.HasSuffix(strings.TrimSpace(string(dir)), ".git") {
		t.Skipf("a git worktree (%s): Go records no commit in a worktree's build", strings.TrimSpace(string(dir)))
	}
	status, err := exec.Command("git", "status", "--porcelain").Output()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "worker")
	// -buildvcs=true whatever GOFLAGS says, as the release script builds.
	// Go calls a tree with untracked files modified too, as git status does.
	if out, err := exec.CommandContext(ctx, "go", "build", "-buildvcs=true", "-tags", "nodemo", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		t.Fatalf("worker version: %v", err)
	}
	want := "worker " + release.Version + " (revision " + string(head[:12])
	if len(status) > 0 {
		want += "-modified"
	}
	if got := string(out); !strings.HasPrefix(got, want+", ") {
		t.Errorf("worker version says %q, want %q...", got, want)
	}
}
