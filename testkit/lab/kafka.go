package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
)

// CreateTopic creates a topic of partitions partitions with the given
// topic configs (max.message.bytes, ...) through the controller, and
// waits until metadata shows each partition with a leader.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions int, configs map[string]string) error {
	tc := kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}
	for k, v := range configs {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return fmt.Errorf("dial kafka: %w", err)
	}
	defer conn.Close()
	// A broker busy with other work (ACL changes, a second broker joining)
	// has dropped the request's connection (EOF): ask again, on a new one.
	for attempt := 1; ; attempt++ {
		err = createTopic(conn, tc)
		if err == nil || (attempt > 1 && errors.Is(err, kafka.TopicAlreadyExists)) {
			break
		}
		if attempt == 5 || (!errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET)) {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
	// The controller answers before every broker knows the topic.
	deadline := time.Now().Add(20 * time.Second)
	for {
		led := 0
		ps, err := conn.ReadPartitions(topic)
		for _, p := range ps {
			if p.Leader.Host != "" {
				led++
			}
		}
		if err == nil && led == partitions {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: %d of %d partitions have a leader after 20s (%v)", topic, led, partitions, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createTopic sends CreateTopics to the controller conn names.
func createTopic(conn *kafka.Conn, tc kafka.TopicConfig) error {
	ctrl, err := conn.Controller()
	if err != nil {
		return fmt.Errorf("find controller: %w", err)
	}
	cc, err := kafka.Dial("tcp", net.JoinHostPort(ctrl.Host, fmt.Sprint(ctrl.Port)))
	if err != nil {
		return fmt.Errorf("dial controller: %w", err)
	}
	defer cc.Close()
	return cc.CreateTopics(tc)
}
