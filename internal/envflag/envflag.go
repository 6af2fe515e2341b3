// Package envflag is the flag set of every cellttl command: a flag.FlagSet
// whose flags can also be set from an environment variable, as a container
// is configured. Each package declares the flags of the config it fills
// (a RegisterFlags beside its Validate), in a section of the help and, for
// tuning flags, in its advanced tier; commands only gather them.
//
// A flag's variable is Prefix and its name in upper case, '-' becoming '_'
// (CELLTTL_TENANTS for --tenants). A variable with the prefix that names no
// flag is an error, as strict as an unknown flag on the command line: a
// misspelt one would otherwise be ignored without a word.
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// ErrHelp is returned by Parse when -h or --help was given.
var ErrHelp = flag.ErrHelp

// Prefix starts the environment variable of every flag of a FlagSet made
// by New.
const Prefix = "CELLTTL_"

// NoEnv, as a flag's env, reads no variable: the flag is set on the command
// line or not at all (for what must never come from an environment shared
// by accident).
const NoEnv = ""

// Env, as a flag's env, reads the flag's own variable (Prefix and its name)
// and no other.
const Env = Prefix

// EnvName is the variable of the flag name: CELLTTL_KAFKA_SASL_USERNAME for
// kafka-sasl-username.
func EnvName(name string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// FlagSet is a flag.FlagSet whose flags may each read an environment
// variable. A flag given on the command line wins over its variable, which
// wins over the default.
type FlagSet struct {
	*flag.FlagSet
	prefixed bool             // variables are EnvName(flag); unknown ones are errors
	meta     map[string]*meta // by flag name
	order    []string         // sections in the order they were first declared
	section  string           // of the flags declared next
	advanced bool             // the flags declared next are tuning flags
	known    func() []string
	given    map[string]bool // flags set on the command line, after Parse
}

// meta is what a flag was declared with beyond the flag package's own.
type meta struct {
	kind     string // the kind of value its help shows
	env      string // its variable, "" for none
	legacy   string // the variable it read before the prefixed names, read for one release
	section  string
	advanced bool
	instead  string // for a deprecated flag, what to use in its place
}

// New returns a FlagSet whose variables are EnvName of each flag, and that
// prints usage, then every flag with its variable, by section, to out.
func New(name, usage string, out io.Writer) *FlagSet {
	f := newSet(name, usage, out)
	f.prefixed = true
	return f
}

// NewUnprefixed returns a FlagSet whose flags read the variable each names
// as it is, with no check for unknown ones: for tools that are not the
// worker (loadtest), which read the variables the test services print.
func NewUnprefixed(name, usage string, out io.Writer) *FlagSet {
	return newSet(name, usage, out)
}

func newSet(name, usage string, out io.Writer) *FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	f := &FlagSet{FlagSet: fs, meta: map[string]*meta{}}
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\n", usage)
		f.printDefaults(out)
	}
	return f
}

// Section puts the flags declared next under title in the help, in the
// basic tier until Advanced is called.
func (f *FlagSet) Section(title string) {
	f.section, f.advanced = title, false
	if !slices.Contains(f.order, title) {
		f.order = append(f.order, title)
	}
}

// Advanced puts the flags declared next, until the next Section, in the
// advanced tier of their section: tuning whose defaults suit most
// deployments.
func (f *FlagSet) Advanced() { f.advanced = true }

// KnowAlso makes Parse accept a prefixed variable that names no flag of
// this set when known lists it, the variables of the other commands: one
// environment serves every command of a deployment.
func (f *FlagSet) KnowAlso(known func() []string) { f.known = known }

// Names lists the flags of the set.
func (f *FlagSet) Names() []string {
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	return names
}

// withEnv records how the flag name was declared and returns its usage
// with its variable. env is NoEnv, Env, or (for the flags of the worker)
// the variable the flag read before the prefixed names, which it reads for
// one more release, with a warning.
func (f *FlagSet) withEnv(name, kind, env, usage string) string {
	m := &meta{kind: kind, section: f.section, advanced: f.advanced}
	f.meta[name] = m
	switch {
	case env == NoEnv:
		return usage
	case f.prefixed:
		m.env = EnvName(name)
		if env != Env && env != m.env {
			m.legacy = env
		}
	default:
		m.env = env
	}
	return usage + " (env " + m.env + ")"
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

// Choice declares a string flag whose value is one of choices, matched
// without regard to case and stored as the choice is written: a value
// outside them is an error when the flag is parsed, whichever command
// declares it.
func (f *FlagSet) Choice(p *string, name, env, def, usage string, choices ...string) {
	*p = def
	f.Var(&choiceValue{p: p, choices: choices}, name, f.withEnv(name, "string", env, usage))
}

// Value declares a flag of a type of its own, given as text; its current
// value is the default, and its help shows it as a string.
func (f *FlagSet) Value(v flag.Value, name, env, usage string) {
	f.Var(v, name, f.withEnv(name, "string", env, usage))
}

// Parse parses args, then fills every flag not given from its variable.
// Arguments after the flags are an error: no command takes any. So is a
// prefixed variable that names no flag (of this set, or one KnowAlso
// accepts).
func (f *FlagSet) Parse(args []string) error {
	if err := f.FlagSet.Parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", f.Arg(0))
	}
	f.given = map[string]bool{}
	f.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	if err := f.unknownVariables(); err != nil {
		return err
	}
	f.warnDeprecated()
	for _, name := range f.Names() {
		m := f.meta[name]
		if m == nil || m.env == "" || f.given[name] {
			continue
		}
		env := m.env
		v, ok := os.LookupEnv(env)
		if old, set := f.lookupLegacy(m); set {
			switch {
			case !ok:
				env, v, ok = m.legacy, old, true
				fmt.Fprintf(f.Output(), "%s: WARNING: %s is deprecated and read for this release only: set %s instead\n", f.Name(), m.legacy, m.env)
			case strings.TrimSpace(old) != strings.TrimSpace(v):
				// Names only: a value may be a secret (a password being
				// rotated while the names change).
				fmt.Fprintf(f.Output(), "%s: WARNING: %s is ignored: %s is set too, and wins (remove the deprecated variable)\n", f.Name(), m.legacy, m.env)
			}
		}
		if !ok {
			continue
		}
		if err := f.Set(name, strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("environment variable %s=%q for --%s: %w", env, v, name, err)
		}
	}
	return nil
}

// Renamed has the flag name also read old, the variable it read before
// its current one, with the warnings a prefixed set gives its own legacy
// names: for a tool whose variables take the worker's names.
func (f *FlagSet) Renamed(name, old string) { f.meta[name].legacy = old }

// Deprecated marks the flag name as going from the command line at the
// next major release: still read there, with a warning that names
// instead, what to use in its place. Its variable, if it has one, stays
// (a variable does not show in process lists). The help lists it in one
// line at its end, not among the flags a user picks from.
func (f *FlagSet) Deprecated(name, instead string) { f.meta[name].instead = instead }

// warnDeprecated warns of each deprecated flag given on the command line.
// Names only: a value may be a secret.
func (f *FlagSet) warnDeprecated() {
	for _, name := range f.Names() {
		if m := f.meta[name]; m != nil && m.instead != "" && f.given[name] {
			fmt.Fprintf(f.Output(), "%s: WARNING: --%s is deprecated and goes at the next major release: %s\n", f.Name(), name, m.instead)
		}
	}
}

// OnCommandLine reports whether the flag name was set on the command line
// (not by its environment variable, not left at its default).
func (f *FlagSet) OnCommandLine(name string) bool { return f.given[name] }

// IsHelp reports whether err is Parse's answer to -h or --help.
func IsHelp(err error) bool { return errors.Is(err, ErrHelp) }
