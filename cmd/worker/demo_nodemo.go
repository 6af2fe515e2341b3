//go:build nodemo

package main

import (
	"context"
	"errors"
	"io"

	"github.com/cellttl/cellttl/internal/envflag"
)

// demoCmd in a build without the demo (-tags nodemo, the production
// image): the in-process Kafka and Bigtable emulator stay out of the
// binary, and the command has no flags.
type demoCmd struct{}

func (demoCmd) flags(out io.Writer) *envflag.FlagSet {
	return envflag.New("worker demo", "worker demo: not in this build (-tags nodemo).", out)
}

func (demoCmd) run(context.Context, io.Writer, io.Writer) error {
	return usageError(errors.New("this build has no demo (built with -tags nodemo); run `go run ./cmd/worker demo` from a checkout"))
}
