package tenants

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/cellttl/cellttl/internal/bounded"
)

// A tenants source is a file, or a directory of *.yaml files: 100,000
// tenants make a file of several MB, past a Kubernetes ConfigMap's 1 MiB,
// and a kustomize configMapGenerator can ship several ConfigMaps into one
// directory (deploy/k8s/tenants-dir). In a directory the top-level keys
// (strategy, default_ttl, ...) are in exactly one file, and tenants in
// any; a tenant defined in two files is an error naming both.

// file is one file of a source.
type file struct {
	name string // as errors name it: the path of a file, the name in a directory
	data []byte
}

// source is what a tenants path holds, read at one moment.
type source struct {
	dir   bool
	files []file
}

// bytes stands for the source's content: a file's bytes themselves (its
// version is the file's), a directory's each file's name and bytes.
func (s source) bytes() []byte {
	if !s.dir {
		return s.files[0].data
	}
	var out []byte
	for _, f := range s.files {
		out = binary.AppendUvarint(out, uint64(len(f.name)))
		out = append(out, f.name...)
		out = binary.AppendUvarint(out, uint64(len(f.data)))
		out = append(out, f.data...)
	}
	return out
}

// MaxFileBytes bounds a tenants file, and each file of a tenants
// directory: 16 times what a ConfigMap holds. Past it the file is refused,
// and the last good config keeps running.
const MaxFileBytes = 16 << 20

// readSource reads path: a file, or every *.yaml of a directory (names
// starting with a dot are left out: a ConfigMap volume's ..data and its
// timestamped directories), sorted by name.
func readSource(path string) (source, error) {
	info, err := os.Stat(path)
	if err != nil {
		return source{}, fmt.Errorf("read tenants file: %w", err)
	}
	if !info.IsDir() {
		data, err := bounded.ReadFile(path, MaxFileBytes)
		if err != nil {
			return source{}, fmt.Errorf("read tenants file: %w", err)
		}
		return source{files: []file{{name: path, data: data}}}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return source{}, fmt.Errorf("read tenants directory: %w", err)
	}
	src := source{dir: true}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		data, err := bounded.ReadFile(filepath.Join(path, e.Name()), MaxFileBytes)
		if err != nil {
			return source{}, fmt.Errorf("read tenants directory: %w", err)
		}
		src.files = append(src.files, file{name: e.Name(), data: data})
	}
	if len(src.files) == 0 {
		return source{}, fmt.Errorf("tenants directory %s holds no *.yaml file", path)
	}
	slices.SortFunc(src.files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	return src, nil
}

// lineBase spaces the files of a directory apart in line numbers: file i's
// lines are (i+1)*lineBase + its own, so that an error's line says the
// file (and one below lineBase, none: a key no file has).
const lineBase = 1 << 24

// parse parses the source: a file as Parse does, a directory as one file
// of every file's top-level keys and tenants. Errors name the file.
func (s source) parse() (*Config, error) {
	if !s.dir {
		return Parse(s.files[0].data)
	}
	roots := make([]*yaml.Node, len(s.files))
	var errs []error
	for i, f := range s.files {
		root, err := decode(f.data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
			continue
		}
		shift(root, (i+1)*lineBase)
		roots[i] = root
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	merged, err := merge(roots)
	if err == nil {
		var cfg *Config
		if cfg, err = parseRoot(merged, s.bytes()); err == nil {
			return cfg, nil
		}
	}
	return nil, s.name(err)
}

// merge makes one mapping of the files': the top-level keys of each (in
// one file only), and tenants, the tenants of every file (each in one).
func merge(roots []*yaml.Node) (*yaml.Node, error) {
	out := &yaml.Node{Kind: yaml.MappingNode}
	tenants := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1}
	keys, ids := map[string]*yaml.Node{}, map[string]*yaml.Node{}
	var errs []error
	for _, root := range roots {
		for i := 0; i+1 < len(root.Content); i += 2 {
			k, v := root.Content[i], root.Content[i+1]
			if k.Value != "tenants" {
				if prev, dup := keys[k.Value]; dup {
					errs = append(errs, lineErr(k, k.Value, "also at line %d: the top-level keys belong in one file of the directory", prev.Line))
					continue
				}
				keys[k.Value] = k
				out.Content = append(out.Content, k, v)
				continue
			}
			if v.Kind != yaml.MappingNode {
				out.Content = append(out.Content, k, v) // parseTenants says what is wrong with it
				continue
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				id := v.Content[j]
				if prev, dup := ids[id.Value]; dup {
					errs = append(errs, lineErr(id, "tenants."+id.Value, "also defined at line %d", prev.Line))
					continue
				}
				ids[id.Value] = id
				tenants.Content = append(tenants.Content, id, v.Content[j+1])
			}
		}
	}
	out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "tenants", Line: 1}, tenants)
	return out, errors.Join(errs...)
}

// shift moves n and every node under it by lines.
func shift(n *yaml.Node, lines int) {
	n.Line += lines
	for _, c := range n.Content {
		shift(c, lines)
	}
}

var lineRef = regexp.MustCompile(`line (\d+)`)

// name rewrites the shifted line numbers of err into file and line.
func (s source) name(err error) error {
	msg := lineRef.ReplaceAllStringFunc(err.Error(), func(m string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(m, "line "))
		if i := n/lineBase - 1; i >= 0 && i < len(s.files) {
			return fmt.Sprintf("%s line %d", s.files[i].name, n%lineBase)
		}
		if n < lineBase {
			return "the directory" // a key no file has (default_ttl missing)
		}
		return m
	})
	return errors.New(msg)
}

// ConfigMapLimit is the most a Kubernetes ConfigMap holds, and nearLimit
// where a file of tenants is said to near it.
const (
	ConfigMapLimit = 1 << 20
	nearLimit      = ConfigMapLimit * 7 / 8
)

// SizeWarnings says which files of path near ConfigMapLimit: such a file
// soon cannot be shipped as one ConfigMap, and should be split into a
// directory of files (one ConfigMap each).
func SizeWarnings(path string) []string {
	src, err := readSource(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range src.files {
		if len(f.data) >= nearLimit {
			out = append(out, fmt.Sprintf("%s is %d KiB, near the 1 MiB a Kubernetes ConfigMap holds: split its tenants over several files of a directory (--tenants takes a directory; docs/operations.md)",
				f.name, len(f.data)>>10))
		}
	}
	return out
}
