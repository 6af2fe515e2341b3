package envflag

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cellttl/cellttl/internal/duration"
)

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
			if m.advanced != tier.advanced || m.instead != "" {
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
	var gone []string
	f.VisitAll(func(fl *flag.Flag) {
		m := f.meta[fl.Name]
		switch {
		case m.instead != "" && m.env != "":
			gone = append(gone, "--"+fl.Name+" ("+m.instead+"; "+m.env+" stays)")
		case m.instead != "":
			gone = append(gone, "--"+fl.Name+" ("+m.instead+")")
		}
	})
	if len(gone) > 0 {
		fmt.Fprintf(out, "Deprecated on the command line, still read there until the next major release: %s.\n", strings.Join(gone, "; "))
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
