package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// nonroot is the user and group the worker runs as, in the image and in
// the manifests (deploy/k8s/base/deployment.yaml, runAsUser): distroless's
// nonroot, so that a volume set up for that image fits this one.
const nonroot = 65532

// file is one entry of a layer: a regular file, or a directory when dir
// is set.
type file struct {
	name     string // relative to the root, no leading slash
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
}

// caFile is where Go's crypto/x509 looks first on Linux, and where
// Debian's ca-certificates puts its bundle.
const caFile = "etc/ssl/certs/ca-certificates.crt"

// zoneDir is where Go's time package looks first on Linux (and where
// every libc does): a TZ the pod sets is found there, with no variable
// pointing at a zip.
const zoneDir = "usr/share/zoneinfo"

// baseFiles are what every platform's image holds besides the worker:
// the users, the root certificates and the time zones.
func baseFiles(zoneinfo []byte) ([]file, error) {
	files := []file{
		// No shell: the users log in nowhere.
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot))},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", nonroot))},
		// Its home, which the runtimes set HOME to from /etc/passwd: where
		// the Google client libraries look for gcloud's credentials.
		{name: "home/nonroot", mode: 0o700, uid: nonroot, gid: nonroot, dir: true},
	}
	certs, err := rootCertificates()
	if err != nil {
		return nil, err
	}
	files = append(files, file{name: caFile, mode: 0o644, data: certs})
	zones, err := zoneFiles(zoneinfo)
	if err != nil {
		return nil, err
	}
	return append(files, zones...), nil
}

// rootCertificates is the Mozilla (NSS) trust store as PEM, from the
// x509roots/fallback module that go.sum pins. A root NSS trusts only for
// certificates issued before a date is left out: a PEM file cannot say
// so, and a client reading it would trust that root's new certificates
// too.
func rootCertificates() ([]byte, error) {
	var out bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, fmt.Errorf("encode a root certificate: %w", err)
		}
		n++
	}
	if n < 100 {
		return nil, fmt.Errorf("only %d root certificates in golang.org/x/crypto/x509roots/fallback", n)
	}
	return out.Bytes(), nil
}

// zoneFiles unpacks the Go toolchain's zoneinfo.zip (the IANA database
// that time/tzdata embeds, of the Go version that built the worker)
// under zoneDir, one file per zone, as tzdata packages do.
func zoneFiles(zoneinfo []byte) ([]file, error) {
	zr, err := zip.NewReader(bytes.NewReader(zoneinfo), int64(len(zoneinfo)))
	if err != nil {
		return nil, fmt.Errorf("read zoneinfo.zip: %w", err)
	}
	var files []file
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		if !isLocalPath(f.Name) {
			return nil, fmt.Errorf("zoneinfo.zip: unexpected name %q", f.Name)
		}
		r, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("zoneinfo.zip %s: %w", f.Name, err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("zoneinfo.zip %s: %w", f.Name, err)
		}
		files = append(files, file{name: path.Join(zoneDir, f.Name), mode: 0o644, data: data})
	}
	if len(files) < 300 {
		return nil, fmt.Errorf("only %d zones in zoneinfo.zip", len(files))
	}
	return files, nil
}

func isLocalPath(name string) bool {
	return name != "" && !strings.HasPrefix(name, "/") && path.Clean(name) == name && !strings.HasPrefix(name, "../") && name != ".."
}

// layerTar writes files as one tar, in name order, each parent directory
// before what it holds, every entry stamped with mtime (the commit's
// time) and no user or group names: the bytes depend on the files alone.
func layerTar(files []file, mtime time.Time) ([]byte, error) {
	byName := map[string]file{}
	for _, f := range files {
		if !isLocalPath(f.name) {
			return nil, fmt.Errorf("layer entry %q: not a relative path", f.name)
		}
		if _, dup := byName[f.name]; dup {
			return nil, fmt.Errorf("layer entry %q twice", f.name)
		}
		byName[f.name] = f
	}
	for _, f := range files {
		for dir := path.Dir(f.name); dir != "."; dir = path.Dir(dir) {
			if _, ok := byName[dir]; !ok {
				byName[dir] = file{name: dir, mode: 0o755, dir: true}
			}
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range byName {
			if !yield(n) {
				return
			}
		}
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, n := range names {
		f := byName[n]
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: mtime, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
