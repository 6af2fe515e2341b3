package main

import (
	"io"
	"testing"
)

// flagsAtMost bounds each command's flags, as its --help lists them: a
// ratchet the commands met once and must keep. Raise one only with the
// reason in the commit; lower it when a command sheds flags. A flag is a
// promise kept for releases: a new one belongs to the config it fills,
// and most commands share theirs (options.go).
var flagsAtMost = map[string]int{
	"run": 72, "setup": 13, "read": 26, "check": 13, "retime": 19, "migrate": 20,
	"forget": 42, "audit": 14, "retention": 32, "redrive": 57, "demo": 6,
}

func TestCommandsKeepTheirFlagCount(t *testing.T) {
	for name, newCmd := range commandTable() {
		limit, ok := flagsAtMost[name]
		if !ok {
			t.Errorf("command %s has no bound in flagsAtMost: give it one", name)
			continue
		}
		if n := len(newCmd().flags(io.Discard).Names()); n > limit {
			t.Errorf("worker %s has %d flags, more than its %d: fold the new one into a config the command shares, or raise the bound with the reason", name, n, limit)
		}
	}
}
