package tenants

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tenantsFile is a file of n tenants, each with a TTL of its own.
func tenantsFile(n int) string {
	var b strings.Builder
	b.WriteString("default_ttl: 2d\ntenants:\n")
	for i := range n {
		fmt.Fprintf(&b, "  tenant-%06d: %dh\n", i, 1+i%72)
	}
	return b.String()
}

// BenchmarkParse100k parses 100,000 tenants (BENCHMARKS.md, "A hundred
// thousand tenants").
func BenchmarkParse100k(b *testing.B) {
	data := []byte(tenantsFile(100_000))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReloadDirectory100k reloads a directory of four files of 25,000
// tenants each, one of them edited each time: read, parse, compare.
func BenchmarkReloadDirectory100k(b *testing.B) {
	dir := b.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	write("main.yaml", "default_ttl: 2d\n")
	var first string
	for f := range 4 {
		var s strings.Builder
		s.WriteString("tenants:\n")
		for i := range 25_000 {
			fmt.Fprintf(&s, "  tenant-%d-%05d: %dh\n", f, i, 1+i%72)
		}
		write(fmt.Sprintf("part-%d.yaml", f), s.String())
		if f == 0 {
			first = s.String()
		}
	}
	cfg, err := Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	r := NewReloader(dir, cfg, 0, slog.New(slog.DiscardHandler))
	i := 0
	for b.Loop() {
		i++
		write("part-0.yaml", first+fmt.Sprintf("  edited-%d: 1h\n", i))
		if !r.Reload() {
			b.Fatalf("reload %d not applied: %+v", i, r.Status())
		}
	}
}
