//go:build nodemo

package main

import (
	"context"
	"errors"
	"io"

	"github.com/cellttl/cellttl/internal/envflag"
)

// demoFlags: a build without the demo has none of its flags.
func demoFlags(io.Writer) *envflag.FlagSet { return nil }

// runDemo in a build without the demo (-tags nodemo, the production image):
// the in-process Kafka and Bigtable emulator stay out of the binary.
func runDemo(context.Context, []string, io.Writer, io.Writer) error {
	return usageError(errors.New("this build has no demo (built with -tags nodemo); run `go run ./cmd/worker demo` from a checkout"))
}
