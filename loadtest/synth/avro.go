package synth

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/segmentio/kafka-go"
)

// AvroSchema is the schema of the contract's click in Avro, as Avro shapes
// write it: the contract's field names, the time as timestamp-millis.
const AvroSchema = `{"type":"record","name":"Click","namespace":"cellttl.loadtest","fields":[` +
	`{"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},{"name":"user_id","type":"string"},` +
	`{"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"payload","type":"string"}]}`

// Avro is shape s with its values written as Avro of AvroSchema, framed
// for a schema registry that knows the schema as id (magic byte 0, the id
// in 4 bytes big-endian): what the worker reads with --value-format avro
// (which the caller adds to the worker's flags, with the registry's).
// The encoder is this file's own, not the worker's decoder library, so
// that a mistake of one is not checked against itself. Only the shapes of
// the contract's fields have an Avro form; their headers are kept (an
// own TTL in x-ttl stays where --ttl-from reads it).
//
// Bad events are, in turn, a value cut short (undecodable), JSON without
// the framing (not_framed), a schema id the registry does not know
// (unknown_schema), and bytes that are not Avro at all.
func Avro(s Shape, id uint32) (Shape, error) {
	if s.Name != "contract" && s.Name != "own-ttl" {
		return Shape{}, fmt.Errorf("--value-format avro: shape %q has no Avro form (contract and own-ttl have)", s.Name)
	}
	valid := s.valid
	out := s
	out.Name = s.Name + "+avro"
	out.valid = func(id_, tenant, user string, millis int64, payload string) ([]byte, []kafka.Header) {
		_, h := valid(id_, tenant, user, millis, payload)
		return avroClick(id, id_, tenant, user, millis, payload), h
	}
	out.malformed = func(kind int, eid, tenant string) ([]byte, []kafka.Header) {
		switch kind {
		case 0:
			v := avroClick(id, eid, tenant, "u1", 0, "")
			return v[:len(v)-3], nil // the user id and time cut short
		case 1:
			return []byte(`{"event_id":"` + eid + `","tenant_id":"` + tenant + `"}`), nil // no framing
		case 2:
			return avroClick(id+1_000_000, eid, tenant, "u1", 0, ""), nil // an id the registry does not know
		}
		return []byte("\x00\x00\x00\x00\x00binary"), nil // framed, schema id 0, not Avro
	}
	return out, nil
}

// avroClick is one click in Avro's binary encoding, framed with id:
// strings as a zigzag varint length and their bytes, longs as zigzag
// varints, the fields in the schema's order.
func avroClick(id uint32, eventID, tenant, user string, millis int64, payload string) []byte {
	b := make([]byte, 5, 5+5*binary.MaxVarintLen64+len(eventID)+len(tenant)+len(user)+len(payload))
	binary.BigEndian.PutUint32(b[1:], id)
	for _, s := range []string{eventID, tenant, user} {
		b = binary.AppendVarint(b, int64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendVarint(b, millis)
	b = binary.AppendVarint(b, int64(len(payload)))
	return append(b, payload...)
}

// RegisterAvro registers AvroSchema under subject with the schema
// registry at registryURL (its Confluent-compatible API) and returns the
// schema's id: registering a schema the subject has returns its id again.
func RegisterAvro(ctx context.Context, registryURL, subject string) (uint32, error) {
	body, _ := json.Marshal(map[string]string{"schema": AvroSchema, "schemaType": "AVRO"})
	u := strings.TrimSuffix(registryURL, "/") + "/subjects/" + url.PathEscape(subject) + "/versions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("register the Avro schema at %s: %w", u, err)
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("register the Avro schema at %s: %w", u, err)
	}
	defer res.Body.Close()
	text, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var got struct {
		ID uint32 `json:"id"`
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("register the Avro schema at %s: %s: %s", u, res.Status, bytes.TrimSpace(text))
	}
	if err := json.Unmarshal(text, &got); err != nil || got.ID == 0 {
		return 0, fmt.Errorf("register the Avro schema at %s: no id in %q", u, text)
	}
	return got.ID, nil
}
