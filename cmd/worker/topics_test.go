package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// replicasOf is the replication factor of topic's first partition.
func replicasOf(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	if tp := topicOf(t, brokers, topic); tp != nil && len(tp.Partitions) > 0 {
		return len(tp.Partitions[0].Replicas)
	}
	return 0
}

// partitionsOf is how many partitions topic has (0 when it does not exist).
func partitionsOf(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	if tp := topicOf(t, brokers, topic); tp != nil {
		return len(tp.Partitions)
	}
	return 0
}

// topicOf is topic as the metadata gives it, nil when it does not exist.
func topicOf(t *testing.T, brokers []string, topic string) *kafka.Topic {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	md, err := c.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range md.Topics {
		if md.Topics[i].Name == topic && md.Topics[i].Error == nil {
			return &md.Topics[i]
		}
	}
	return nil
}

// configSourceTopic is DescribeConfigs' DYNAMIC_TOPIC_CONFIG: a setting of
// the topic itself, not the broker's default.
const configSourceTopic = 1

// topicConfigs reads a topic's configs from the broker, by name.
func topicConfigs(t *testing.T, brokers []string, topic string) map[string]kafka.DescribeConfigResponseConfigEntry {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	res, err := c.DescribeConfigs(context.Background(), &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"cleanup.policy", "retention.ms", "segment.ms", "message.timestamp.type"}}}})
	if err == nil && len(res.Resources) != 1 {
		err = fmt.Errorf("%d resources in the answer", len(res.Resources))
	}
	if err == nil {
		err = res.Resources[0].Error
	}
	if err != nil {
		t.Fatalf("configs of %s: %v", topic, err)
	}
	out := map[string]kafka.DescribeConfigResponseConfigEntry{}
	for _, e := range res.Resources[0].ConfigEntries {
		out[e.ConfigName] = e
	}
	return out
}
