package kafkaconn

import (
	"context"
	"net"
	"strings"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/describeconfigs"
	"github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
	"github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/cellttl/cellttl/internal/waitfor"
)

// Waits makes each request rt carries a wait of the command that bounds
// its waits (internal/waitfor), named by the broker asked, the request and
// the topics it names. Without a watch in the request's context (worker
// run), it adds one context lookup.
func Waits(rt kafka.RoundTripper) kafka.RoundTripper { return waiting{rt} }

type waiting struct{ kafka.RoundTripper }

func (t waiting) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if !waitfor.Watching(ctx) {
		return t.RoundTripper.RoundTrip(ctx, addr, req)
	}
	w := waitfor.BeginAt(ctx, "Kafka broker "+addr.String(), requestOf(req))
	res, err := t.RoundTripper.RoundTrip(ctx, addr, req)
	return res, w.End(err)
}

// requestOf says a request in words: "Metadata of clicks, clicks.dlq".
func requestOf(req kafka.Request) string {
	var topics []string
	switch r := req.(type) {
	case *metadata.Request:
		if topics = r.TopicNames; topics == nil {
			return "Metadata of every topic"
		}
	case *listoffsets.Request:
		for _, t := range r.Topics {
			topics = append(topics, t.Topic)
		}
	case *fetch.Request:
		for _, t := range r.Topics {
			topics = append(topics, t.Topic)
		}
	case *describeconfigs.Request:
		for _, res := range r.Resources {
			if res.ResourceType == resourceTopic {
				topics = append(topics, res.ResourceName)
			}
		}
	}
	if len(topics) == 0 {
		return req.ApiKey().String()
	}
	return req.ApiKey().String() + " of " + strings.Join(topics, ", ")
}

// resourceTopic is a topic's resource type in DescribeConfigs.
const resourceTopic = 2
