package tablemeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/release"

	"github.com/cellttl/cellttl/internal/envflag"
)

// ChangeFlag is the flag that records another --ttl-from over the one
// recorded.
const ChangeFlag = "--ttl-from-change"

// RegisterChangeFlag declares --ttl-from-change, for the commands that
// write events (the worker and redrive). A flag only, without an
// environment variable: it overrides the check that keeps a table's rows
// under one setting, and an environment shared by accident (a ConfigMap
// every command reads, a variable left from the last change) would turn
// the check off for every start to come, which is the drift it is there
// to stop.
func RegisterChangeFlag(f *envflag.FlagSet, change *bool) {
	f.Section("Input mapping")
	f.Bool(change, ChangeFlag[2:], envflag.NoEnv, false, "record this --ttl-from as the table's setting although another is recorded (its history keeps the earlier ones, with when); without it a worker or redrive whose --ttl-from differs refuses to start. Remove it once the change has rolled out (a flag only: no environment variable)")
}

// Setting is one --ttl-from setting recorded.
type Setting struct {
	// TTLFrom is the flag's value, "" for none (every event its tenant's
	// TTL).
	TTLFrom string `json:"ttl_from"`
	// Since is when it was recorded.
	Since time.Time `json:"since"`
	// By is the command that recorded it (worker run, worker redrive),
	// Host where it ran.
	By   string `json:"by"`
	Host string `json:"host,omitempty"`
	// Change is set when it was recorded over another, with ChangeFlag.
	Change bool `json:"change,omitempty"`

	column string
}

// who says who recorded the setting.
func (s Setting) who() string {
	if s.Host == "" {
		return s.By
	}
	return s.By + " on " + s.Host
}

// Describe names the setting as flags say it.
func (s Setting) Describe() string { return DescribeTTLFrom(s.TTLFrom) }

// DescribeTTLFrom names a --ttl-from value as flags say it.
func DescribeTTLFrom(v string) string {
	if v == "" {
		return "no --ttl-from"
	}
	return "--ttl-from " + strconv.Quote(v)
}

// Claim is a command's claim to write with a setting.
type Claim struct {
	TTLFrom string
	// Change records TTLFrom over another setting.
	Change bool
	// By and Host say who claims, for the history.
	By, Host string
	Now      time.Time
	// DryRun checks and records nothing (a dry run writes no row).
	DryRun bool
}

// MismatchError is a claim refused: the table's rows were written with
// another setting.
type MismatchError struct {
	Table    string
	Recorded Setting
	Want     string
}

func (e *MismatchError) Error() string {
	r := e.Recorded
	return fmt.Sprintf("the rows of table %s are written with %s (recorded %s by %s), and this command runs with %s. "+
		"Under another setting an event gets another TTL than the rows already written: a replay, a redrive or a rollout writes a second version of each row "+
		"that lives its tenant's TTL instead of the event's own (or the reverse), and once the shorter version is collected neither `worker audit` nor `worker retime` can tell. "+
		"Run with %s, or, to change the setting on purpose, pass %s (a flag only) to the first worker of the change",
		e.Table, r.Describe(), r.Since.Format(time.RFC3339), r.who(), DescribeTTLFrom(e.Want), r.Describe(), ChangeFlag)
}

// ClaimTTLFrom checks c against the setting recorded, records c's when none
// is (the first writer) or when c.Change says so, and returns the setting
// in force after the claim, and whether the claim recorded it. A claim
// that differs from the recorded one without Change is a *MismatchError.
// Two claims at once are settled by Bigtable: each records only if no
// setting was recorded since it read the record, and reads it again
// otherwise. A dry run returns the setting it would record, unrecorded.
func (s *Store) ClaimTTLFrom(ctx context.Context, c Claim) (_ Setting, recorded bool, _ error) {
	for range 5 {
		rec, err := s.Read(ctx)
		if err != nil {
			return Setting{}, false, err
		}
		if err := rec.CheckWriter(s.name, release.Version); err != nil {
			return Setting{}, false, err
		}
		cur, ok := rec.Current()
		switch {
		case ok && cur.TTLFrom == c.TTLFrom:
			return cur, false, nil
		case ok && !c.Change:
			return cur, false, &MismatchError{Table: s.name, Recorded: cur, Want: c.TTLFrom}
		case c.DryRun:
			return Setting{TTLFrom: c.TTLFrom, By: c.By, Host: c.Host, Change: ok}, false, nil
		}
		set, won, err := s.record(ctx, c, cur, ok)
		if err != nil || won {
			return set, won, err
		}
	}
	return Setting{}, false, fmt.Errorf("record the --ttl-from setting in %s: other writers kept recording theirs; try again", s.name)
}

// record writes c's setting unless a setting newer than cur (none when
// !ok) has been recorded since; won says whether it wrote.
func (s *Store) record(ctx context.Context, c Claim, cur Setting, ok bool) (_ Setting, won bool, _ error) {
	ms := c.Now.UnixMilli()
	newer := colTTLFrom // any setting: none was recorded
	if ok {
		// After the one in force, whatever the clocks: the history sorts
		// by column.
		ms = max(ms, cur.Since.UnixMilli()+1)
		newer = cur.column + "\x00"
	}
	set := Setting{TTLFrom: c.TTLFrom, Since: time.UnixMilli(ms).UTC(), By: c.By, Host: c.Host, Change: ok, column: settingColumn(ms)}
	value, err := json.Marshal(stored{TTLFrom: set.TTLFrom, By: set.By, Host: set.Host, Change: set.Change})
	if err != nil {
		return Setting{}, false, err
	}
	m := bigtable.NewMutation()
	m.Set(Family, set.column, at(set.Since), value)
	cond := bigtable.ColumnRangeFilter(Family, newer, colTTLFromEnd)
	var matched bool
	if err := s.tbl.Apply(ctx, Key, bigtable.NewCondMutation(cond, nil, m), bigtable.GetCondMutationResult(&matched)); err != nil {
		return Setting{}, false, fmt.Errorf("record the --ttl-from setting in %s: %w", s.name, err)
	}
	return set, !matched, nil
}

// colTTLFromEnd ends the range of the settings' columns ('/' follows '.').
const colTTLFromEnd = "ttl_from/"

// ClaimAndSay makes c (ClaimTTLFrom, within a minute) and says in the log
// what it found: the first writer's record, a change recorded, a
// --ttl-from-change left over, or agreement. A refusal is an error that
// says the command refuses to start.
func (s *Store) ClaimAndSay(ctx context.Context, c Claim, log *slog.Logger) error {
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	set, recorded, err := s.ClaimTTLFrom(ctx, c)
	var mm *MismatchError
	switch {
	case errors.As(err, &mm), errors.Is(err, ErrTooOld):
		return fmt.Errorf("refusing to start: %w", err)
	case err != nil:
		return err
	case c.DryRun && set.Since.IsZero():
		log.Info("--ttl-from not recorded: a dry run", "ttl_from", set.Describe())
	case recorded && !set.Change:
		log.Info("recorded the --ttl-from setting the table's rows are written with: the first writer", "ttl_from", set.Describe(), "table", s.name)
	case recorded:
		log.Warn("recorded a new --ttl-from setting for the table: rows written before keep the setting they were written with (worker audit reports a row that outlives its own TTL); remove "+ChangeFlag+" once the change has rolled out",
			"ttl_from", set.Describe(), "table", s.name)
	case c.Change:
		log.Warn(ChangeFlag+" given, and the table's setting is already this one: remove the flag, which would let the next change through unchecked", "ttl_from", set.Describe())
	default:
		log.Info("--ttl-from agrees with the table's record", "ttl_from", set.Describe(), "since", set.Since, "recorded_by", set.By)
	}
	return nil
}
