package ingest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Headers set on every dead-lettered message. The original key, value and
// headers are kept as they were.
const (
	HeaderReason          = "cellttl.reason"
	HeaderField           = "cellttl.field"
	HeaderSourceTopic     = "cellttl.source.topic"
	HeaderSourcePartition = "cellttl.source.partition"
	HeaderSourceOffset    = "cellttl.source.offset"
)

// DeadLetter is a message set aside with the reason.
type DeadLetter struct {
	Msg    kafka.Message
	Reason string
	// Field is the event field at fault, "" when none is.
	Field string
}

// DeadLetterWriter produces rejected messages to the dead-letter topic.
type DeadLetterWriter struct {
	w         *kafka.Writer
	transport *kafka.Transport
	sent      metric.Int64Counter
}

// NewDeadLetterWriter writes to topic. Each Write waits for all in-sync
// replicas: a dead-lettered offset is committed right after.
func NewDeadLetterWriter(brokers []string, topic string, transport *kafka.Transport) *DeadLetterWriter {
	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		MaxAttempts:  3,
		// The topic is created by the broker when it allows that, and by the
		// operator otherwise.
		AllowAutoTopicCreation: true,
	}
	if transport == nil {
		transport = &kafka.Transport{}
	}
	w.Transport = transport
	sent, _ := otel.Meter(scope).Int64Counter("messaging.client.sent.messages", metric.WithUnit("{message}"),
		metric.WithDescription("messages produced to the dead-letter topic"))
	return &DeadLetterWriter{w: w, transport: transport, sent: sent}
}

// Write produces the dead letters, all or nothing as far as the caller is
// concerned: on error none may be treated as delivered.
func (d *DeadLetterWriter) Write(ctx context.Context, dls []DeadLetter) error {
	msgs := make([]kafka.Message, len(dls))
	for i, dl := range dls {
		src := dl.Msg
		headers := make([]kafka.Header, 0, len(src.Headers)+5)
		headers = append(headers, src.Headers...)
		headers = append(headers,
			kafka.Header{Key: HeaderReason, Value: []byte(dl.Reason)},
			kafka.Header{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
			kafka.Header{Key: HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(src.Partition), 10)},
			kafka.Header{Key: HeaderSourceOffset, Value: strconv.AppendInt(nil, src.Offset, 10)},
		)
		if dl.Field != "" {
			headers = append(headers, kafka.Header{Key: HeaderField, Value: []byte(dl.Field)})
		}
		msgs[i] = kafka.Message{Key: src.Key, Value: src.Value, Headers: headers, Time: src.Time}
	}
	if err := d.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("produce %d messages to dead-letter topic %s: %w", len(msgs), d.w.Topic, err)
	}
	d.sent.Add(ctx, int64(len(msgs)), metric.WithAttributes(
		attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", d.w.Topic)))
	return nil
}

// Close flushes and closes the producer.
func (d *DeadLetterWriter) Close() error {
	err := d.w.Close()
	// The transport's connections and their goroutines go with it.
	d.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("close dead-letter writer: %w", err)
	}
	return nil
}
