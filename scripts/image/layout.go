package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

const (
	refNameAnnotation   = "org.opencontainers.image.ref.name"
	containerdImageName = "io.containerd.image.name"
)

// writeLayoutTar writes idx as an OCI image layout in one tar: what
// docker load, podman load and skopeo (oci-archive:) read. Its index.json
// names the image once per tag, as ghcr.io/cellttl/cellttl:TAG for the
// tools that take a whole name (containerd, Docker), as TAG for those
// that take the layout's reference name.
func writeLayoutTar(out string, idx v1.ImageIndex, tags []string, mtime time.Time) error {
	dir, err := os.MkdirTemp("", "cellttl-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write the OCI layout: %w", err)
	}
	for _, tag := range tags {
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			refNameAnnotation:   tag,
			containerdImageName: imageName + ":" + tag,
		})); err != nil {
			return fmt.Errorf("write the OCI layout: %w", err)
		}
	}
	var files []file
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			files = append(files, file{name: filepath.ToSlash(rel), mode: 0o755, dir: true})
			return nil
		}
		data, err := os.ReadFile(path)
		files = append(files, file{name: filepath.ToSlash(rel), mode: 0o644, data: data})
		return err
	})
	if err != nil {
		return err
	}
	tarBytes, err := layerTar(files, mtime)
	if err != nil {
		return err
	}
	return os.WriteFile(out, tarBytes, 0o644)
}

// readLayoutTar unpacks a layout tar (writeLayoutTar's) into dir.
func readLayoutTar(in, dir string) (layout.Path, error) {
	f, err := os.Open(in)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("unpack %s: %w", in, err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return "", fmt.Errorf("unpack %s: entry %q is outside the layout", in, h.Name)
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			err = writeFrom(target, tr)
		default:
			err = fmt.Errorf("entry %q is neither a file nor a directory", h.Name)
		}
		if err != nil {
			return "", fmt.Errorf("unpack %s: %w", in, err)
		}
	}
	return layout.FromPath(dir)
}

func writeFrom(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
