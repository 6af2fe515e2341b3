// Command image makes the worker's container image without a daemon and
// without a base image from a registry, with go-containerregistry, and
// pushes it. scripts/release.sh runs it; its test pushes to a registry on
// loopback, pulls the image back and runs it.
//
//	image build -dist DIR -zoneinfo ZIP   the image of DIR/worker-linux-{amd64,arm64}:
//	                                      DIR/image.tar (an OCI layout) and
//	                                      DIR/image.index.json (its index)
//	image push -dist DIR REPO             push DIR's image to REPO, each
//	                                      platform's SBOM as its referrer
//	image verify -dist DIR REF            check that REF is DIR's image, with
//	                                      DIR's SBOMs as its referrers
//
// The image is scratch plus what the worker needs: the Mozilla root
// certificates (golang.org/x/crypto/x509roots/fallback, pinned by go.sum)
// at /etc/ssl/certs/ca-certificates.crt, the time zones of the Go
// toolchain (lib/time/zoneinfo.zip) under /usr/share/zoneinfo, the
// nonroot user (65532) in /etc/passwd and /etc/group, and the worker at
// /usr/local/bin/worker. Everything is derived from the binaries and
// pinned sources: the same commit and Go version give the same digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  image build -dist DIR -zoneinfo ZIP
  image push -dist DIR REPO
  image verify -dist DIR REF`

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	dist := fs.String("dist", "dist", "the release directory: the binaries and SBOMs in, the image out")
	zoneinfo := fs.String("zoneinfo", "", "the Go toolchain's lib/time/zoneinfo.zip (build)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "build":
		if *zoneinfo == "" || fs.NArg() != 0 {
			return fmt.Errorf("build takes -dist and -zoneinfo\n%s", usage)
		}
		built, err := build(*dist, *zoneinfo)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "image %s: %s, tagged %v\n", built.digest, built.summary, built.tags)
		return nil
	case "push":
		if fs.NArg() != 1 {
			return fmt.Errorf("push takes a repository\n%s", usage)
		}
		pushed, err := push(ctx, *dist, fs.Arg(0))
		if err != nil {
			return err
		}
		for _, ref := range pushed {
			fmt.Fprintln(stdout, ref)
		}
		return nil
	case "verify":
		if fs.NArg() != 1 {
			return fmt.Errorf("verify takes an image reference\n%s", usage)
		}
		digest, err := verify(ctx, *dist, fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s is %s, with the SBOMs of %s as its referrers\n", fs.Arg(0), digest, *dist)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
