package inproc

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"
)

// The stack a demo needs: topics that exist at start, and Bigtable clients
// that work without BIGTABLE_EMULATOR_HOST, each usable after the other is
// closed.
func TestStack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := StartKafka(KafkaOptions{Topics: []Topic{{Name: "in", Partitions: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	conn, err := kafka.DialContext(ctx, "tcp", k.Brokers()[0])
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions("in")
	conn.Close()
	if err != nil || len(parts) != 3 {
		t.Fatalf("topic in: %d partitions, %v; want 3", len(parts), err)
	}

	t.Setenv("BIGTABLE_EMULATOR_HOST", "")
	bt, err := StartBigtable(BigtableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Close()
	dc, ac, err := bt.Clients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := ac.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := ac.CreateColumnFamily(ctx, "t", "c"); err != nil {
		t.Fatal(err)
	}
	ac.Close()
	mut := bigtable.NewMutation()
	mut.Set("c", "q", bigtable.Now(), []byte("v"))
	if err := dc.Open("t").Apply(ctx, "row", mut); err != nil {
		t.Fatalf("write after the admin client closed: %v", err)
	}
}
