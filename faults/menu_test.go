package faults

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The threat model (docs/threat-model.md) is the randomized retention test's
// menu: each row of its tables names, in its last column, the actions of
// scheduleMenu that try it, or says it is not drawn (and, when another test
// tries it, which). So a row added to the model without a way to search
// it reads "not drawn" where a reader sees it, and an action added to the
// generator says which threat it tries.
func TestThreatModelNamesTheMenu(t *testing.T) {
	doc, err := os.ReadFile("../docs/threat-model.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	menu := map[string]bool{}
	for _, a := range scheduleMenu {
		menu[a.name] = true
	}
	named := map[string]bool{}
	name := regexp.MustCompile("`([a-zA-Z]+)`")
	tables, rows := 0, 0
	inTable := false
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		switch {
		case !inTable:
			inTable = true
			tables++
			if got := strings.TrimSpace(cells[len(cells)-1]); got != "drawn by" {
				t.Errorf("a table of the threat model ends in the column %q, want \"drawn by\": %s", got, line)
			}
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		}
		rows++
		threat := strings.TrimSpace(cells[0])
		drawn := strings.TrimSpace(cells[len(cells)-1])
		var actions []string
		for _, m := range name.FindAllStringSubmatch(drawn, -1) {
			if menu[m[1]] {
				actions = append(actions, m[1])
				named[m[1]] = true
			} else if !strings.HasPrefix(m[0], "`-") && !strings.Contains(drawn, "not drawn") {
				// A name that is no action, in a row that says it is drawn.
				t.Errorf("row %q names %s, which is not an action of the menu", threat, m[0])
			}
		}
		if len(actions) == 0 && !strings.HasPrefix(drawn, "not drawn") {
			t.Errorf("row %q names no action of the menu and does not say it is not drawn: %q", threat, drawn)
		}
	}
	if tables < 5 || rows < 20 {
		t.Fatalf("read %d tables and %d rows of the threat model: the section's shape changed under the test", tables, rows)
	}
	for _, a := range scheduleMenu {
		if !named[a.name] {
			t.Errorf("the menu's action %s tries no row of the threat model", a.name)
		}
		if a.weight <= 0 {
			t.Errorf("the menu's action %s has weight %d: a step never draws it", a.name, a.weight)
		}
	}
	if i := slices.IndexFunc(scheduleMenu, func(a scheduleAction) bool { return a.run == nil }); i >= 0 {
		t.Errorf("the menu's action %s does nothing", scheduleMenu[i].name)
	}
}
