package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
)

// flags is a flag.FlagSet whose every flag also reads an environment
// variable. A flag given on the command line wins over its variable, which
// wins over the default.
type flags struct {
	*flag.FlagSet
	env map[string]string // flag name -> variable
}

func newFlags(name, usage string, out io.Writer) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	f := &flags{FlagSet: fs, env: map[string]string{}}
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\nFlags (each also read from the environment variable shown):\n", usage)
		fs.PrintDefaults()
	}
	return f
}

func (f *flags) withEnv(name, env, usage string) string {
	f.env[name] = env
	return usage + " (env " + env + ")"
}

func (f *flags) String(p *string, name, env, def, usage string) {
	f.StringVar(p, name, def, f.withEnv(name, env, usage))
}

func (f *flags) Int(p *int, name, env string, def int, usage string) {
	f.IntVar(p, name, def, f.withEnv(name, env, usage))
}

func (f *flags) Int64(p *int64, name, env string, def int64, usage string) {
	f.Int64Var(p, name, def, f.withEnv(name, env, usage))
}

func (f *flags) Bool(p *bool, name, env string, def bool, usage string) {
	f.BoolVar(p, name, def, f.withEnv(name, env, usage))
}

// Duration accepts days too ("2d"), like tenants.yaml.
func (f *flags) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	*p = def
	f.Var((*durationValue)(p), name, f.withEnv(name, env, usage))
}

type durationValue time.Duration

func (d *durationValue) String() string { return duration.Format(time.Duration(*d)) }
func (d *durationValue) Set(s string) error {
	v, err := duration.Parse(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// Parse parses args, then fills every flag not given from its variable.
func (f *flags) Parse(args []string) error {
	if err := f.FlagSet.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for name, env := range f.env {
		v, ok := os.LookupEnv(env)
		if !ok || given[name] {
			continue
		}
		if err := f.Set(name, strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("environment variable %s=%q for --%s: %w", env, v, name, err)
		}
	}
	return nil
}

// EnvNames returns every variable the flags read, for tests and docs.
func (f *flags) EnvNames() map[string]string { return f.env }
