// Package envflag is the flag set of every cellttl command: a flag.FlagSet
// whose flags can also be set from an environment variable, as a container
// is configured. Each package declares the flags of the config it fills
// (a RegisterFlags beside its Validate); commands only gather them.
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
)

// ErrHelp is returned by Parse when -h or --help was given.
var ErrHelp = flag.ErrHelp

// FlagSet is a flag.FlagSet whose flags may each read an environment
// variable. A flag given on the command line wins over its variable, which
// wins over the default. A flag registered with env "" reads none.
type FlagSet struct {
	*flag.FlagSet
	env   map[string]string // flag name -> variable
	kinds map[string]string // flag name -> the kind of value its help shows
	given map[string]bool   // flags set on the command line, after Parse
}

// New returns a FlagSet that prints usage, then every flag with its
// variable, to out.
func New(name, usage string, out io.Writer) *FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	f := &FlagSet{FlagSet: fs, env: map[string]string{}, kinds: map[string]string{}}
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\nFlags (each also read from the environment variable shown):\n", usage)
		f.printDefaults(out)
	}
	return f
}

// zeroes are the values whose default the help leaves out, by kind.
var zeroes = map[string]string{"string": "", "int": "0", "uint": "0", "float": "0", "bool": "false", "duration": duration.Format(0), "size": "0"}

// printDefaults prints the flags as flag.PrintDefaults does, except that a
// flag of a type of its own (a broker list, an offset policy) shows the
// kind it was declared with, and its default.
func (f *FlagSet) printDefaults(out io.Writer) {
	f.VisitAll(func(fl *flag.Flag) {
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", fl.Name)
		name, usage := flag.UnquoteUsage(fl)
		kind, known := f.kinds[fl.Name]
		if known {
			// As flag.PrintDefaults shows them: durations of days were
			// always a flag.Value of their own.
			name = map[string]string{"bool": "", "duration": "value"}[kind]
			if name == "" && kind != "bool" {
				name = kind
			}
		}
		if len(name) > 0 {
			b.WriteString(" " + name)
		}
		if b.Len() <= 4 {
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch {
		case !known || fl.DefValue == zeroes[kind]:
		case kind == "string":
			fmt.Fprintf(&b, " (default %q)", fl.DefValue)
		default:
			fmt.Fprintf(&b, " (default %v)", fl.DefValue)
		}
		fmt.Fprint(out, b.String(), "\n")
	})
}

func (f *FlagSet) withEnv(name, kind, env, usage string) string {
	f.kinds[name] = kind
	if env == "" {
		return usage
	}
	f.env[name] = env
	return usage + " (env " + env + ")"
}

// String declares a string flag.
func (f *FlagSet) String(p *string, name, env, def, usage string) {
	f.StringVar(p, name, def, f.withEnv(name, "string", env, usage))
}

// Int declares an int flag.
func (f *FlagSet) Int(p *int, name, env string, def int, usage string) {
	f.IntVar(p, name, def, f.withEnv(name, "int", env, usage))
}

// Int64 declares an int64 flag.
func (f *FlagSet) Int64(p *int64, name, env string, def int64, usage string) {
	f.Int64Var(p, name, def, f.withEnv(name, "int", env, usage))
}

// Uint64 declares a uint64 flag.
func (f *FlagSet) Uint64(p *uint64, name, env string, def uint64, usage string) {
	f.Uint64Var(p, name, def, f.withEnv(name, "uint", env, usage))
}

// Float64 declares a float64 flag.
func (f *FlagSet) Float64(p *float64, name, env string, def float64, usage string) {
	f.Float64Var(p, name, def, f.withEnv(name, "float", env, usage))
}

// Bool declares a bool flag.
func (f *FlagSet) Bool(p *bool, name, env string, def bool, usage string) {
	f.BoolVar(p, name, def, f.withEnv(name, "bool", env, usage))
}

// Duration declares a duration flag that accepts days too ("2d"), like
// tenants.yaml.
func (f *FlagSet) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	*p = def
	f.Var((*durationValue)(p), name, f.withEnv(name, "duration", env, usage))
}

// Bytes declares a size flag: a number of bytes, with or without a unit
// ("67108864", "64MiB", "8MB"; see ParseBytes).
func (f *FlagSet) Bytes(p *int64, name, env string, def int64, usage string) {
	*p = def
	f.Var((*bytesValue)(p), name, f.withEnv(name, "size", env, usage))
}

// BytesInt declares a size flag of an int.
func (f *FlagSet) BytesInt(p *int, name, env string, def int, usage string) {
	*p = def
	f.Var((*intBytesValue)(p), name, f.withEnv(name, "size", env, usage))
}

// Value declares a flag of a type of its own, given as text; its current
// value is the default, and its help shows it as a string.
func (f *FlagSet) Value(v flag.Value, name, env, usage string) {
	f.Var(v, name, f.withEnv(name, "string", env, usage))
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

// units are the byte units a size may end with.
var units = []struct {
	name string
	n    int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}, {"KB", 1e3}, {"B", 1}}

// ParseBytes reads a size: a whole number of bytes, optionally followed by
// a unit, B, kB (or KB), KiB, MB, MiB, GB or GiB; a space may come between.
func ParseBytes(s string) (int64, error) {
	num, mul := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.name) {
			num, mul = strings.TrimSpace(strings.TrimSuffix(num, u.name)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mul {
		return 0, fmt.Errorf("invalid size %q: want a whole number of bytes, with or without B, kB, KiB, MB, MiB, GB or GiB", s)
	}
	return n * mul, nil
}

// FormatBytes writes a size with the largest binary unit that divides it.
func FormatBytes(n int64) string {
	for _, u := range units[:3] {
		if n != 0 && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

type bytesValue int64

func (b *bytesValue) String() string { return FormatBytes(int64(*b)) }
func (b *bytesValue) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = bytesValue(n)
	return nil
}

type intBytesValue int

func (b *intBytesValue) String() string { return FormatBytes(int64(*b)) }
func (b *intBytesValue) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	if n > math.MaxInt {
		return fmt.Errorf("invalid size %q: too large", s)
	}
	*b = intBytesValue(n)
	return nil
}

// Parse parses args, then fills every flag not given from its variable.
// Arguments after the flags are an error: no command takes any.
func (f *FlagSet) Parse(args []string) error {
	if err := f.FlagSet.Parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", f.Arg(0))
	}
	f.given = map[string]bool{}
	f.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	for name, env := range f.env {
		v, ok := os.LookupEnv(env)
		if !ok || f.given[name] {
			continue
		}
		if err := f.Set(name, strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("environment variable %s=%q for --%s: %w", env, v, name, err)
		}
	}
	return nil
}

// OnCommandLine reports whether the flag name was set on the command line
// (not by its environment variable, not left at its default).
func (f *FlagSet) OnCommandLine(name string) bool { return f.given[name] }

// IsHelp reports whether err is Parse's answer to -h or --help.
func IsHelp(err error) bool { return errors.Is(err, ErrHelp) }
