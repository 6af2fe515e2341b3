package duration

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := map[string]time.Duration{
		"2d": 48 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute, "36h": 36 * time.Hour,
		"1.5d": 36 * time.Hour, "1h30m15s": time.Hour + 30*time.Minute + 15*time.Second, "500ms": 500 * time.Millisecond,
		"0": 0, "-1h": -time.Hour, "3650d": 3650 * Day,
	}
	for s, want := range good {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	for _, s := range []string{"", "d", "2", "2x", "h1", "1d-2h", "106752d", "99999999999999999999h", "1..5d"} {
		if got, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %s, want an error", s, got)
		}
	}
}

func TestFormatRoundTrips(t *testing.T) {
	for _, d := range []time.Duration{time.Second, time.Hour, 48 * time.Hour, 36 * time.Hour, 90 * time.Minute, 1500 * time.Millisecond, 3*Day + time.Millisecond, -time.Hour} {
		s := Format(d)
		if got, err := Parse(s); err != nil || got != d {
			t.Errorf("Parse(Format(%s) = %q) = %s, %v", d, s, got, err)
		}
	}
	for d, want := range map[time.Duration]string{48 * time.Hour: "2d", 36 * time.Hour: "1d12h", time.Hour: "1h", 90 * time.Second: "1m30s", 0: "0s"} {
		if got := Format(d); got != want {
			t.Errorf("Format(%s) = %q, want %q", d, got, want)
		}
	}
}
