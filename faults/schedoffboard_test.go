package faults

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// A schedule's offboardings: a tenant leaves (worker offboard) while its
// events, letters and erasures are in flight, and now and then comes back
// under its id (--rejoin). The checker holds them to promise 6:
//
//  6. An offboarded tenant stays gone: once offboard has returned, no row
//     of the tenant's events exists, whatever their time, user or place,
//     through replays, resets and redrives, and no letter of one placed
//     after it keeps its payload; after a rejoin has returned, the events
//     appended before it, and those at or before the time the tenant left
//     plus the skew, stay so, and promise 4 holds its later ones.

// schedOffboard is an offboarding a schedule made, and the rejoin that
// ended it (nil: none yet).
type schedOffboard struct {
	tenant   string
	acked    int       // the events acknowledged when offboard began
	leftAt   time.Time // the receipt's record's recorded_at
	returned time.Time
	rejoin   *schedRejoin
}

// schedRejoin is a rejoin a schedule made.
type schedRejoin struct {
	acked       int // the events acknowledged when the rejoin began: its mark
	incarnation int // of the input topic its mark's offsets are of
	returned    time.Time
}

// forbids reports whether o keeps ev from being written, or lettered with
// its payload.
func (o schedOffboard) forbids(ev schedEvent, base time.Time) bool {
	if o.tenant != ev.tenant {
		return false
	}
	r := o.rejoin
	return r == nil || ev.seq < r.acked || !base.After(o.leftAt.Add(scheduleSkew))
}

// spares reports whether promise 4 may hold ev to a row despite o: a
// rejoin covers every record of the tenant in an incarnation of the topic
// other than its mark's, once a worker has seen that one.
func (o schedOffboard) spares(ev schedEvent, base time.Time) bool {
	return o.tenant != ev.tenant || !o.forbids(ev, base) && ev.incarnation == o.rejoin.incarnation
}

// offboard offboards acme or globex, one not away already.
func (sc *schedule) offboard() {
	sc.t.Helper()
	var stay []string
	for _, t := range []string{"acme", "globex"} {
		if !slices.ContainsFunc(sc.offboards, func(o schedOffboard) bool { return o.tenant == t && o.rejoin == nil }) {
			stay = append(stay, t)
		}
	}
	if len(stay) == 0 {
		return
	}
	tenant := stay[sc.r.IntN(len(stay))]
	o := schedOffboard{tenant: tenant, acked: len(sc.events)}
	out := sc.command("offboard", "--tenant", tenant, "--requested-by", "schedule", "--format", "json")
	var rc struct {
		Record struct {
			RecordedAt time.Time `json:"recorded_at"`
		} `json:"ledger_record"`
		SecondPass int64 `json:"second_pass_rows"`
	}
	if err := json.Unmarshal(out[:strings.IndexByte(string(out), '\n')], &rc); err != nil {
		sc.t.Fatalf("offboard's receipt: %v\n%s", err, out)
	}
	o.leftAt, o.returned = rc.Record.RecordedAt, time.Now()
	sc.offboards = append(sc.offboards, o)
	sc.note("offboard %s: left at %s, %d rows in the second pass", tenant, o.leftAt.Format(time.RFC3339Nano), rc.SecondPass)
}

// rejoin brings back a tenant that is away, if one is.
func (sc *schedule) rejoin() {
	sc.t.Helper()
	if i := slices.IndexFunc(sc.offboards, func(o schedOffboard) bool { return o.rejoin == nil }); i >= 0 {
		sc.rejoinOf(&sc.offboards[i])
	}
}

// rejoinOf brings o's tenant back, and waits the workers' bound, within
// which each takes the rejoin (the receipt says so).
func (sc *schedule) rejoinOf(o *schedOffboard) {
	sc.t.Helper()
	r := &schedRejoin{acked: len(sc.events), incarnation: len(sc.topicIDs) - 1}
	sc.command("offboard", "--tenant", o.tenant, "--rejoin", "--requested-by", "schedule", "--format", "json")
	r.returned = time.Now()
	o.rejoin = r
	time.Sleep(3*200*time.Millisecond + 2*time.Second + time.Second)
	sc.note("rejoin %s (it left at %s)", o.tenant, o.leftAt.Format(time.RFC3339Nano))
}

// command runs a worker command with the schedule's flags and returns its
// stdout, failing the schedule on an error.
func (sc *schedule) command(name string, args ...string) []byte {
	sc.t.Helper()
	cmd := exec.Command(sc.s.bin, append(append([]string{name}, sc.flags()...), args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		sc.t.Fatalf("worker %s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// offboardedRow holds a row to promise 6.
func (sc *schedule) offboardedRow(ev schedEvent, base time.Time, key string) []string {
	var bad []string
	for _, o := range sc.offboards {
		if o.forbids(ev, base) {
			bad = append(bad, fmt.Sprintf("offboarded, written: %s as %s (%s left at %s, rejoined %t)", ev, key, o.tenant, o.leftAt.Format(time.RFC3339Nano), o.rejoin != nil))
		}
	}
	return bad
}

// offboardedLetter holds a letter with payload, placed at placed, to
// promise 6: none placed after the offboarding returned (by the
// placing worker's clock, which may lie workerSkewMax off).
func (sc *schedule) offboardedLetter(ev schedEvent, placed time.Time) []string {
	base, bounded := ev.base()
	if !bounded {
		base = time.UnixMilli(0) // no time: forbidden while the tenant is away
	}
	var bad []string
	for _, o := range sc.offboards {
		if o.forbids(ev, base) && placed.After(o.returned.Add(workerSkewMax)) {
			bad = append(bad, fmt.Sprintf("offboarded, lettered with its payload: %s placed %s (%s left at %s)", ev, placed.UTC().Format(time.RFC3339Nano), o.tenant, o.leftAt.Format(time.RFC3339Nano)))
		}
	}
	return bad
}

// offboardSpares reports whether every offboarding spares ev (promise 4).
func (sc *schedule) offboardSpares(ev schedEvent, base time.Time) bool {
	for _, o := range sc.offboards {
		if !o.spares(ev, base) {
			return false
		}
	}
	return true
}
