package ingest

import (
	"os/exec"
	"strings"
	"testing"
)

// The packages split out of ingest depend on it, or beside it, never the
// other way: ingest knows no dead letters, and the Kafka connection
// settings know neither consumer nor dead letters.
func TestImportDirection(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	const mod = "github.com/cellttl/cellttl/"
	forbidden := map[string][]string{
		"ingest":             {"deadletter", "redrive", "pipeline", "sink"},
		"internal/kafkaconn": {"ingest", "deadletter", "redrive", "pipeline"},
		"deadletter":         {"redrive", "pipeline", "sink"},
	}
	for pkg, never := range forbidden {
		out, err := exec.Command(goTool, "list", "-deps", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		deps := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			deps[d] = true
		}
		for _, n := range never {
			if deps[mod+n] {
				t.Errorf("%s depends on %s", pkg, n)
			}
		}
	}
}
