// Package deadletter sets messages aside: the letter format (the original
// record with cellttl.* headers, cut to fit the topic), the dead-letter
// topics by retention class (Topics: each letter goes where its payload is
// gone before its event expires) and the Writer that produces letters to
// them, learning and checking the topics' settings.
package deadletter

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/bounded"
)

// Headers set on every dead-lettered message. The original key, value and
// headers are kept as they were, unless together they do not fit the
// dead-letter topic: then the value is cut (and if need be the original
// headers and key dropped), and the truncation headers say so.
const (
	HeaderReason          = "cellttl.reason"
	HeaderField           = "cellttl.field"
	HeaderSourceTopic     = "cellttl.source.topic"
	HeaderSourcePartition = "cellttl.source.partition"
	HeaderSourceOffset    = "cellttl.source.offset"
	// HeaderSourceTopicID is the incarnation of the source topic the
	// record was read from (Kafka's topic id, base64), when the writer
	// knew it: an erasure's mark is held to it, as offsets mean nothing
	// across a topic deleted and created again.
	HeaderSourceTopicID = "cellttl.source.topic_id"
	// HeaderSourceTimestamp is the original record's timestamp (RFC 3339,
	// empty when it had none). The dead letter's own timestamp is the time
	// it is produced: a dead-letter topic that bounds timestamps
	// (message.timestamp.after.max.ms) would refuse the original's forever,
	// and a record timestamp out of bounds is one reason to dead-letter.
	HeaderSourceTimestamp = "cellttl.source.timestamp"
	// HeaderTenant is the event's tenant when it was read; HeaderExpiresAt
	// when the event expires in Bigtable (RFC 3339 UTC, milliseconds), set
	// when it would have been written.
	HeaderTenant    = "cellttl.tenant"
	HeaderExpiresAt = "cellttl.expires_at"
	// HeaderPayload is "omitted" on a letter that keeps no payload (no
	// key, value or original headers; see Topics): its reason is
	// then the reason's class, since the sentence may quote the value.
	HeaderPayload = "cellttl.payload"
	// HeaderReasonClass is the reason's class (a cellttl_dead_letters_total
	// reason: not_json, invalid_id, unlisted_tenant…), for tools that sort
	// letters, such as worker redrive --reason.
	HeaderReasonClass = "cellttl.reason.class"

	HeaderTruncated      = "cellttl.truncated"       // "true"
	HeaderOriginalSize   = "cellttl.original.size"   // bytes of the original value
	HeaderOriginalSHA256 = "cellttl.original.sha256" // hex SHA-256 of the original value
	HeaderDropped        = "cellttl.dropped"         // "headers", "key" or "headers,key": what else was left out

	// A record batch the worker could not decode is one dead letter with
	// no key and no value: HeaderSourceOffset is its first offset (or the
	// first not delivered), and these say the rest.
	HeaderSourceOffsetLast = "cellttl.source.offset.last" // its last offset
	HeaderBatchCodec       = "cellttl.batch.codec"        // none, gzip, snappy, lz4 or zstd
	HeaderBatchSize        = "cellttl.batch.size"         // bytes of its records as stored, compressed
	HeaderBatchSHA256      = "cellttl.batch.sha256"       // hex SHA-256 of those bytes
)

// HeaderPlaced is when the worker placed the letter (RFC 3339, to the
// millisecond, UTC): the topic's keep counts from then, and worker redrive
// --strict-retention counts an event's time from the earlier of it and the
// letter's timestamp. Signed with the rest when letters are signed.
const HeaderPlaced = "cellttl.placed"

// placedFormat is HeaderPlaced's layout, of a fixed length; placedBytes
// bounds the header's size in a letter, as messageSize counts it.
const (
	placedFormat = "2006-01-02T15:04:05.000Z"
	placedBytes  = int64(5 + len(HeaderPlaced) + 5 + len(placedFormat))
)

// Letter is a message set aside with the reason: what the writer turns
// into a dead letter, its headers the letter format below.
type Letter struct {
	Msg    ingest.Message
	Reason string
	// Field is the event field at fault, "" when none is.
	Field string
	// Cut and Undecodable are the fetcher's, when Msg is a record it cut
	// or a batch it could not decode (see Fetched).
	Cut         *ingest.Cut
	Undecodable *ingest.Undecodable
	// Class is the reason's class (a cellttl_dead_letters_total reason
	// label), said instead of Reason on a letter without its payload.
	Class string
	// Tenant is the event's tenant when tenants.yaml lists it, else "".
	Tenant string
	// ExpiresAt is when the event expires in Bigtable, zero when it would
	// not be written there.
	ExpiresAt time.Time
	// KeepUntil is when the letter's payload must be gone: ExpiresAt, or
	// the bound for events without a listed tenant. Zero keeps no payload.
	KeepUntil time.Time
}

// deadLetterMessage builds the message for dl that fits under max bytes
// (estimated as kafka-go does, which is never less than the record's size
// in its batch). A message that does not fit keeps a prefix of its value,
// then if need be loses its original headers, then its key; the truncation
// headers record the original value's size and SHA-256 and what was left
// out. Without payload, it keeps none of the three, and the reason's class
// instead of its sentence.
func letterMessage(dl Letter, max int64, payload bool) (m kafka.Message, truncated bool) {
	src := dl.Msg
	ours := ourHeaders(dl, payload)
	if u := dl.Undecodable; u != nil {
		return kafka.Message{Headers: append(ours,
			kafka.Header{Key: HeaderSourceOffsetLast, Value: strconv.AppendInt(nil, u.Last, 10)},
			kafka.Header{Key: HeaderBatchCodec, Value: []byte(u.Codec)},
			kafka.Header{Key: HeaderBatchSize, Value: strconv.AppendInt(nil, int64(u.Size), 10)},
			kafka.Header{Key: HeaderBatchSHA256, Value: []byte(hex.EncodeToString(u.SHA256[:]))},
		)}, false
	}
	theirs := make([]kafka.Header, len(src.Headers), len(src.Headers)+len(ours)+5)
	for i, h := range src.Headers {
		theirs[i] = kafka.Header{Key: h.Key, Value: h.Value}
		if strings.HasPrefix(h.Key, "cellttl.") {
			theirs[i].Key = HeaderProducerPrefix + h.Key
		}
	}
	m = kafka.Message{Key: src.Key, Value: src.Value, Headers: append(theirs, ours...)}
	if payload && dl.Cut == nil && messageSize(m) <= max {
		return m, false
	}
	// Cut here, or by the fetcher already (which hashed all of the value
	// and may have left out the key or headers).
	size, sum, fetcherDropped := int64(len(src.Value)), [sha256.Size]byte{}, ""
	if c := dl.Cut; c != nil {
		size, sum, fetcherDropped = c.Size, c.SHA256, c.Dropped
	} else {
		sum = sha256.Sum256(src.Value)
	}
	truncation := []kafka.Header{
		{Key: HeaderTruncated, Value: []byte("true")},
		{Key: HeaderOriginalSize, Value: strconv.AppendInt(nil, size, 10)},
		{Key: HeaderOriginalSHA256, Value: []byte(hex.EncodeToString(sum[:]))},
	}
	if !payload {
		return kafka.Message{Headers: append(append(ours, truncation...),
			kafka.Header{Key: HeaderDropped, Value: []byte("headers,key")},
			kafka.Header{Key: HeaderPayload, Value: []byte("omitted")})}, true
	}
	for _, drop := range []string{"", "headers", "headers,key"} {
		m = kafka.Message{Key: src.Key}
		m.Headers = append(append([]kafka.Header{}, ours...), truncation...)
		if drop == "" {
			m.Headers = append(theirs[:len(src.Headers):len(src.Headers)], m.Headers...)
		}
		if drop == "headers,key" {
			m.Key = nil
		}
		if dropped := droppedParts(fetcherDropped, drop); dropped != "" {
			m.Headers = append(m.Headers, kafka.Header{Key: HeaderDropped, Value: []byte(dropped)})
		}
		if room := max - messageSize(m); room >= 0 {
			m.Value = src.Value[:min(int64(len(src.Value)), room)]
			return m, true
		}
	}
	return m, true // our own headers alone are larger than the topic allows: the broker will say so
}

// ourHeaders are the cellttl.* headers of dl's letter, with its payload
// or without, the undecodable batch's and the truncation's aside.
func ourHeaders(dl Letter, payload bool) []kafka.Header {
	src := dl.Msg
	var ts []byte
	if !src.Time.IsZero() {
		ts = src.Time.UTC().AppendFormat(nil, time.RFC3339Nano)
	}
	// A letter without its payload says the reason's class: the sentence
	// may quote the value. An undecodable batch's sentence quotes none.
	// Any reason is cut to bounded.Reason: it may quote what a producer or
	// a registry chose, and must not make the letter outgrow its topic.
	reason := bounded.Text(dl.Reason, bounded.Reason)
	if !payload && dl.Undecodable == nil && dl.Class != "" {
		reason = dl.Class
	}
	ours := []kafka.Header{
		{Key: HeaderReason, Value: []byte(reason)},
		{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
		{Key: HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(src.Partition), 10)},
		{Key: HeaderSourceOffset, Value: strconv.AppendInt(nil, src.Offset, 10)},
		{Key: HeaderSourceTimestamp, Value: ts},
	}
	if src.TopicID != "" {
		ours = append(ours, kafka.Header{Key: HeaderSourceTopicID, Value: []byte(src.TopicID)})
	}
	if dl.Field != "" {
		ours = append(ours, kafka.Header{Key: HeaderField, Value: []byte(dl.Field)})
	}
	if dl.Class != "" {
		ours = append(ours, kafka.Header{Key: HeaderReasonClass, Value: []byte(dl.Class)})
	}
	if dl.Tenant != "" {
		ours = append(ours, kafka.Header{Key: HeaderTenant, Value: []byte(dl.Tenant)})
	}
	if !dl.ExpiresAt.IsZero() {
		ours = append(ours, kafka.Header{Key: HeaderExpiresAt, Value: dl.ExpiresAt.UTC().AppendFormat(nil, "2006-01-02T15:04:05.000Z07:00")})
	}
	return ours
}

// droppedParts is the HeaderDropped value for what the fetcher and the
// dead-letter writer left out, each "", "key", "headers" or "headers,key".
func droppedParts(a, b string) string {
	headers := strings.Contains(a, "headers") || strings.Contains(b, "headers")
	key := strings.Contains(a, "key") || strings.Contains(b, "key")
	switch {
	case headers && key:
		return "headers,key"
	case headers:
		return "headers"
	case key:
		return "key"
	}
	return ""
}

// messageSize bounds from above what kafka-go counts for a message against
// Writer.BatchBytes, and so the record's size in its batch: the v1 message
// layout (crc, magic, attributes, key and value lengths, timestamp) and
// each header with 5-byte length prefixes, the largest a varint of an int32
// takes.
func messageSize(m kafka.Message) int64 {
	n := int64(4+1+1+4+len(m.Key)+4+len(m.Value)+8) + 5
	for _, h := range m.Headers {
		n += int64(5 + len(h.Key) + 5 + len(h.Value))
	}
	return n
}
