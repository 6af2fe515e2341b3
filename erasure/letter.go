package erasure

// Subject is whose data a dead letter would copy, as far as its record
// was read.
type Subject struct {
	Tenant, User string
	// UserRead is set when the record was read far enough to know its
	// user ("" then being an event without one, which no erasure covers).
	UserRead bool
	// Millis is the event's time, or its record's when the event's could
	// not be read (as Erased judges an invalid event).
	Millis int64
	At     Position
}

// LetterFate is what the ledger makes of a dead letter about to be
// produced.
type LetterFate uint8

const (
	// KeepLetter: produce it as placed, payload and all.
	KeepLetter LetterFate = iota
	// DropLetter: its user is erased; no letter at all, which would be a
	// copy of the user's data. Settled as erased.
	DropLetter
	// LetterWithoutPayload: its user could not be read, and an erasure in
	// force could cover it; produce it without the payload (the letter
	// still says where its record is, for a redrive that reads it again
	// and asks the ledger by the user it then reads).
	LetterWithoutPayload
)

// Letter decides what becomes of a dead letter of s: asked when the letter
// is produced, each attempt, so that a letter that waited out an outage
// of the dead-letter topic obeys the erasures recorded meanwhile. A user
// the ledger does not know at once (Known: the lookup of its decision
// answered a ledger reread since) is judged as one whose user could not
// be read: the letter goes without its payload, never with a copy the
// ledger might erase.
func (l *Ledger) Letter(s Subject) LetterFate {
	switch {
	case s.UserRead && l.Erased(s.Tenant, s.User, s.Millis, s.At):
		return DropLetter
	case s.UserRead && !l.Known(s.Tenant, s.User):
		return LetterWithoutPayload
	case !s.UserRead && l.Covers(s.Tenant):
		return LetterWithoutPayload
	}
	return KeepLetter
}
