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
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
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

// zeroes are the values whose default the help leaves out, by kind.
var zeroes = map[string]string{"string": "", "int": "0", "uint": "0", "float": "0", "bool": "false", "duration": duration.Format(0), "size": "0"}

// printDefaults prints the flags by section, the basic tier first, then
// the advanced one. A set without sections prints one list.
func (f *FlagSet) printDefaults(out io.Writer) {
	tiers := []struct {
		advanced bool
		title    string
	}{{false, "Flags"}, {true, "Advanced flags (tuning: the defaults suit most deployments)"}}
	if f.hasEnv() {
		fmt.Fprintln(out, "Each flag is also read from the environment variable shown; the command line wins.")
		fmt.Fprintln(out)
	}
	for _, tier := range tiers {
		var sections []string
		bySection := map[string][]*flag.Flag{}
		f.VisitAll(func(fl *flag.Flag) {
			m := f.meta[fl.Name]
			if m.advanced != tier.advanced {
				return
			}
			if _, ok := bySection[m.section]; !ok {
				sections = append(sections, m.section)
			}
			bySection[m.section] = append(bySection[m.section], fl)
		})
		if len(sections) == 0 {
			continue
		}
		// Sections in the order they were declared; flags by name within.
		slices.SortStableFunc(sections, func(a, b string) int {
			return cmp.Compare(slices.Index(f.order, a), slices.Index(f.order, b))
		})
		fmt.Fprintf(out, "%s:\n", tier.title)
		for _, sec := range sections {
			if sec != "" {
				fmt.Fprintf(out, "\n  %s:\n", sec)
			}
			for _, fl := range bySection[sec] {
				fmt.Fprint(out, f.describe(fl), "\n")
			}
		}
		fmt.Fprintln(out)
	}
}

func (f *FlagSet) hasEnv() bool {
	for _, m := range f.meta {
		if m.env != "" {
			return true
		}
	}
	return false
}

// describe writes a flag as flag.PrintDefaults does, except that a flag of
// a type of its own (a broker list, an offset policy) shows the kind it was
// declared with, and its default.
func (f *FlagSet) describe(fl *flag.Flag) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  -%s", fl.Name)
	name, usage := flag.UnquoteUsage(fl)
	m := f.meta[fl.Name]
	kind, known := "", m != nil
	if known {
		kind = m.kind
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
	return b.String()
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

type choiceValue struct {
	p       *string
	choices []string
}

func (c *choiceValue) String() string {
	if c.p == nil {
		return ""
	}
	return *c.p
}

func (c *choiceValue) Set(s string) error {
	for _, ch := range c.choices {
		if strings.EqualFold(s, ch) {
			*c.p = ch
			return nil
		}
	}
	return fmt.Errorf("%q: want %s", s, oneOf(c.choices))
}

// oneOf writes choices as "a, b or c".
func oneOf(choices []string) string {
	if len(choices) < 2 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
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

func (f *FlagSet) lookupLegacy(m *meta) (string, bool) {
	if m.legacy == "" {
		return "", false
	}
	return os.LookupEnv(m.legacy)
}

// unknownVariables is the error for the prefixed variables that name no
// flag, each with the nearest variable that does.
func (f *FlagSet) unknownVariables() error {
	if !f.prefixed {
		return nil
	}
	known := map[string]bool{}
	for _, v := range f.Variables() {
		known[v] = true
	}
	var errs []error
	others := false // the other commands' variables are in known
	for _, kv := range os.Environ() {
		env, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(env, Prefix) || known[env] || serviceLink.MatchString(env) {
			continue
		}
		if f.known != nil && !others {
			// Asked only for a variable that is not the set's own: the
			// other commands' flag sets are made to answer.
			for _, v := range f.known() {
				known[v] = true
			}
			if others = true; known[env] {
				continue
			}
		}
		err := fmt.Errorf("environment variable %s names no flag", env)
		if near := nearest(env, known); near != "" {
			err = fmt.Errorf("%w (did you mean %s?)", err, near)
		}
		errs = append(errs, err)
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// serviceLink matches the variables Kubernetes gives a pod for each
// Service of its namespace (a Service named cellttl-metrics gives
// CELLTTL_METRICS_SERVICE_HOST, CELLTTL_METRICS_PORT_8080_TCP_ADDR...):
// not the operator's words, and no flag's name ends so.
var serviceLink = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)?)$`)

// nearest is the name of names closest to s by edit distance, if it is
// close enough to be a misspelling.
func nearest(s string, names map[string]bool) string {
	best, bestD := "", 4
	for n := range names {
		if d := distance(s, n); d < bestD || (d == bestD && n < best) {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Variables lists the variables the set's flags read, legacy ones
// included.
func (f *FlagSet) Variables() []string {
	var vs []string
	for _, m := range f.meta {
		if m.env != "" {
			vs = append(vs, m.env)
		}
		if m.legacy != "" {
			vs = append(vs, m.legacy)
		}
	}
	slices.Sort(vs)
	return vs
}

// OnCommandLine reports whether the flag name was set on the command line
// (not by its environment variable, not left at its default).
func (f *FlagSet) OnCommandLine(name string) bool { return f.given[name] }

// IsHelp reports whether err is Parse's answer to -h or --help.
func IsHelp(err error) bool { return errors.Is(err, ErrHelp) }
