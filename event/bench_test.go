package event

import "testing"

func BenchmarkDecode(b *testing.B) {
	v := []byte(`{"event_id":"e-123456","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-11-21T09:00:00.123Z","page":"/pricing","payload":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	b.SetBytes(int64(len(v)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dec.Decode(v, recordTime); err != nil {
			b.Fatal(err)
		}
	}
}
