package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The tests a package marks are found, wherever the call sits in the
// body; a test that names the mark otherwise, or a helper that calls it,
// is not one.
func TestMarkedTestsAreFound(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import (
	"testing"

	"github.com/cellttl/cellttl/testkit/testenv"
)

func TestFirst(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the broker's answer")
}

func TestLater(t *testing.T) {
	t.Parallel()
	if true {
		testenv.BrokerVersionMatters(t, "nested")
	}
}

func TestUnmarked(t *testing.T) { BrokerVersionMatters(t, "not testenv's") }

func TestOther(t *testing.T) { helper(t) }

func helper(t *testing.T) { testenv.BrokerVersionMatters(t, "a helper") }

func BrokerVersionMatters(*testing.T, string) {}
`
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	aliased := `package p

import (
	"testing"

	te "github.com/cellttl/cellttl/testkit/testenv"
)

func TestAliased(t *testing.T) { te.BrokerVersionMatters(t, "under another name") }
`
	if err := os.WriteFile(filepath.Join(dir, "q_test.go"), []byte(aliased), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := marked(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"TestAliased", "TestFirst", "TestLater"}; !slices.Equal(got, want) {
		t.Errorf("marked tests %v, want %v", got, want)
	}
	if _, err := marked(filepath.Join(dir, "missing")); err == nil {
		t.Error("a directory that does not exist gave no error")
	}
}
