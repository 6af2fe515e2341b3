package schema

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/cellttl/cellttl/event"
)

// FuzzRead feeds the framing and the readers of both binary formats
// whatever bytes: they must never panic nor read past the value, and
// every failure must be an *event.Error (a dead letter's reason), never
// another error (which would hold the record for good). So must the
// decoding of whole values into JSON, of values found stored.
func FuzzRead(f *testing.F) {
	ac, am := compile(f, Avro, clickAvro, event.DefaultFields())
	pc, pm := compile(f, Protobuf, clickProto, event.DefaultFields())
	f.Add([]byte{0, 0, 0, 0, 1, 2, 'e', 2, 'a', 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 2, 0, 10, 1, 'e', 18, 1, 'a'})
	f.Add([]byte{0, 0, 0, 0, 2, 2, 2, 50, 3, 10, 1, 'x'})
	f.Add([]byte{0, 0, 0, 0, 1, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1})
	avroDec := decoder(1, ac, am)
	protoDec := decoder(2, pc, pm)
	f.Fuzz(func(t *testing.T, v []byte) {
		for _, d := range []event.Decoder{avroDec, protoDec} {
			_, err := d.DecodeRecord(&event.Source{Value: v, Time: recordTime})
			var e *event.Error
			if err != nil && !errors.As(err, &e) {
				t.Fatalf("%q: an error that is no *event.Error: %v", v, err)
			}
		}
		for _, c := range []*Compiled{ac, pc} {
			doc, err := c.JSON(v)
			var e *event.Error
			if err != nil && !errors.As(err, &e) {
				t.Fatalf("%q: JSON: an error that is no *event.Error: %v", v, err)
			}
			if err == nil && !json.Valid(doc) {
				t.Fatalf("%q: JSON gave no JSON: %s", v, doc)
			}
		}
	})
}
