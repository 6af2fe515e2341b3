package kafkaconn

import (
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"testing"

	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// exchange writes req through a checkedConn to a broker that answers
// with answer (after its own size and the request's correlation id), and
// reads the answer back as kafka-go does; it returns what kafka-go read,
// the bytes allocated meanwhile, and kafka-go's error.
func exchange(t *testing.T, key protocol.ApiKey, version int16, req protocol.Message, answer []byte) (protocol.Message, uint64, error) {
	t.Helper()
	client, broker := net.Pipe()
	defer client.Close()
	go func() {
		defer broker.Close()
		var size [4]byte
		if _, err := broker.Read(size[:]); err != nil {
			return
		}
		rest := make([]byte, binary.BigEndian.Uint32(size[:]))
		for n := 0; n < len(rest); {
			m, err := broker.Read(rest[n:])
			if err != nil {
				return
			}
			n += m
		}
		out := binary.BigEndian.AppendUint32(nil, uint32(4+len(answer)))
		out = append(out, rest[4:8]...) // the correlation id
		_, _ = broker.Write(append(out, answer...))
	}()
	conn := &checkedConn{Conn: client, asked: map[int32]asked{}}
	if err := protocol.WriteRequest(conn, version, 7, "cellttl", req); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, msg, err := protocol.ReadResponse(conn, key, version)
	runtime.ReadMemStats(&after)
	return msg, after.TotalAlloc - before.TotalAlloc, err
}

// An answer claiming more entries than it has bytes is refused before
// kafka-go reads it: kafka-go allocated the whole claim first (2^20
// brokers from twelve bytes: about 50 MB here, a crash at 2^31).
func TestAnswerClaimingMoreThanItHolds(t *testing.T) {
	hostile := binary.BigEndian.AppendUint32(nil, 1<<20) // Metadata v1: brokers, 2^20 of them
	_, allocated, err := exchange(t, protocol.Metadata, 1, &metadata.Request{}, hostile)
	if !errors.Is(err, ErrAnswer) {
		t.Errorf("a Metadata answer claiming 2^20 brokers in 4 bytes: %v, want ErrAnswer", err)
	}
	if allocated > 1<<20 {
		t.Errorf("%d bytes allocated reading it, want the answer's own few", allocated)
	}
}

// A well-formed answer reads as before, and a fetch answer passes as it
// comes, unchecked: the fetcher reads it itself.
func TestAnswersThatHoldWhatTheyClaim(t *testing.T) {
	good := kmsg.NewPtrMetadataResponse()
	good.SetVersion(1)
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = 1, "127.0.0.1", 9092
	good.Brokers = append(good.Brokers, b)
	msg, _, err := exchange(t, protocol.Metadata, 1, &metadata.Request{}, good.AppendTo(nil))
	if m, ok := msg.(*metadata.Response); err != nil || !ok || len(m.Brokers) != 1 || m.Brokers[0].Port != 9092 {
		t.Errorf("a Metadata answer of one broker: %+v, %v", msg, err)
	}
	// A Fetch v4 answer of no topics, throttle 0, read by kafka-go.
	fetchAnswer := make([]byte, 8)
	if _, _, err := exchange(t, protocol.Fetch, 4, &fetch.Request{}, fetchAnswer); err != nil {
		t.Errorf("a fetch answer: %v", err)
	}
}

// A broker's answer past MaxAnswer is refused before it is read.
func TestAnswerPastItsBound(t *testing.T) {
	client, broker := net.Pipe()
	defer client.Close()
	go func() {
		defer broker.Close()
		_, _ = broker.Read(make([]byte, 64))
		_, _ = broker.Write(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, MaxAnswer+1), 7))
	}()
	conn := &checkedConn{Conn: client, asked: map[int32]asked{}}
	if err := protocol.WriteRequest(conn, 1, 7, "cellttl", &metadata.Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(make([]byte, 16)); !errors.Is(err, ErrAnswer) {
		t.Errorf("an answer of MaxAnswer+1 bytes: %v, want ErrAnswer", err)
	}
}
