package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/cellttl/cellttl/internal/release"
)

// buildVersion is the revision a build without VCS information may set
// (-ldflags -X main.buildVersion=...): one from a tree without .git, or
// from a git worktree, where the go command reads no commit. The name is
// the one release scripts set before releases had versions.
var buildVersion string

// version is this release (release.Version): /status, --version,
// cellttl_build_info and the telemetry resource's service.version.
func version() string { return release.Version }

// revision is the VCS revision of the build, read from it once: "unknown"
// for a build that recorded none (go run, a tree without .git).
var revision = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev := s.Value[:12]
				for _, m := range bi.Settings {
					if m.Key == "vcs.modified" && m.Value == "true" {
						rev += "-modified"
					}
				}
				return rev
			}
		}
	}
	return cmp.Or(buildVersion, "unknown")
})

func versionLine() string {
	return fmt.Sprintf("worker %s (revision %s, %s)", version(), revision(), runtime.Version())
}
