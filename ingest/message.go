package ingest

import "time"

// Message is a record fetched from Kafka, its bytes the worker's own: what
// ingest hands out, so that the layers above know no Kafka client.
type Message struct {
	Topic string
	// TopicID is the incarnation of Topic the record was read from, when
	// it is known apart from its reader's (a dead letter says which it was
	// placed from); "" otherwise.
	TopicID   string
	Partition int
	Offset    int64
	// Key and Value are nil when the record has none (an empty one is not
	// nil).
	Key, Value []byte
	Headers    []Header
	// Time is the record's timestamp, the zero Time when it has none.
	Time time.Time
}

// Header is a record header. Its Value is nil when the record's is null.
type Header struct {
	Key   string
	Value []byte
}
