package kwire

import (
	"os/exec"
	"strings"
	"testing"
)

// The wire leaf imports nothing of cellttl, and no Kafka client: replacing
// the client, or this package, touches one package.
func TestImportsNothingOfTheModule(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/cellttl/cellttl/ingest/kwire" {
			continue
		}
		if strings.HasPrefix(dep, "github.com/cellttl/cellttl") || strings.HasPrefix(dep, "github.com/segmentio/kafka-go") {
			t.Errorf("kwire depends on %s", dep)
		}
	}
}
