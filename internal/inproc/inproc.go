// Package inproc starts in-process stand-ins for the services cellttl
// needs: Kafka (franz-go's kfake) and the Bigtable emulator (bttest). The
// demo, the load test's --embedded mode and the tests without real
// services all start them here, and only here: production code never
// imports this package (the worker's demo command is left out of builds
// tagged nodemo).
package inproc

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"sync"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/bttest"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Topic is a topic to create at start, with its partitions.
type Topic struct {
	Name       string
	Partitions int
}

// KafkaOptions shape the in-process cluster.
type KafkaOptions struct {
	Brokers int // 1 when 0
	Topics  []Topic
	// AutoCreate creates a topic on first use, with DefaultPartitions
	// partitions, as the test broker of scripts/services.sh does.
	AutoCreate        bool
	DefaultPartitions int
}

// Kafka is an in-process Kafka cluster.
type Kafka struct{ c *kfake.Cluster }

// StartKafka starts the brokers on free ports of 127.0.0.1.
func StartKafka(o KafkaOptions) (*Kafka, error) {
	opts := []kfake.Opt{kfake.NumBrokers(max(1, o.Brokers))}
	for _, t := range o.Topics {
		opts = append(opts, kfake.SeedTopics(int32(t.Partitions), t.Name))
	}
	if o.AutoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if o.DefaultPartitions > 0 {
		opts = append(opts, kfake.DefaultNumPartitions(o.DefaultPartitions))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start in-process Kafka: %w", err)
	}
	return &Kafka{c: c}, nil
}

// Brokers are the addresses to bootstrap from.
func (k *Kafka) Brokers() []string { return k.c.ListenAddrs() }

// Close stops the broker.
func (k *Kafka) Close() { k.c.Close() }

// Bigtable is an in-process Bigtable emulator.
type Bigtable struct {
	srv   *bttest.Server
	mu    sync.Mutex
	conns []*grpc.ClientConn // given to clients, which do not close them
}

// BigtableOptions shape the in-process emulator.
type BigtableOptions struct {
	// Addr to listen on; a free port of 127.0.0.1 when empty.
	Addr string
	// Quiet silences the emulator's log of every cell its GC deletes
	// (thousands of lines in a demo): bttest writes it through the standard
	// library's logger and offers no other, so Quiet discards that logger's
	// output for the whole process. cellttl itself logs through log/slog.
	Quiet bool
}

// StartBigtable starts an emulator.
func StartBigtable(o BigtableOptions) (*Bigtable, error) {
	if o.Quiet {
		stdlog.SetOutput(io.Discard)
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	srv, err := bttest.NewServer(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("start in-process Bigtable emulator: %w", err)
	}
	return &Bigtable{srv: srv}, nil
}

// Addr is the emulator's address, as BIGTABLE_EMULATOR_HOST takes it.
func (b *Bigtable) Addr() string { return b.srv.Addr }

// Close closes the connections of the clients Clients made, then stops the
// emulator.
func (b *Bigtable) Close() {
	b.mu.Lock()
	for _, c := range b.conns {
		c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.srv.Close()
}

// dial opens a connection to the emulator that Close closes: a client
// given a connection leaves it open when it is closed itself.
func (b *Bigtable) dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(b.srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to the in-process Bigtable emulator: %w", err)
	}
	b.mu.Lock()
	b.conns = append(b.conns, conn)
	b.mu.Unlock()
	return conn, nil
}

// Clients opens data and admin clients of the emulator's project "local",
// instance "local", without BIGTABLE_EMULATOR_HOST: the connections are
// given to the clients rather than found through the environment, and
// Close closes them. BIGTABLE_EMULATOR_HOST, when set, still makes the
// client library dial the emulator it names, and leave that connection
// open: the clients use the in-process one all the same.
func (b *Bigtable) Clients(ctx context.Context) (*bigtable.Client, *bigtable.AdminClient, error) {
	dconn, err := b.dial()
	if err != nil {
		return nil, nil, err
	}
	// Without the client's built-in metrics: with no emulator variable set
	// they look for a Google Cloud environment (an HTTP request to the
	// metadata server) and export to Cloud Monitoring, neither of which an
	// in-process emulator has; the request's idle connection also outlived
	// the clients.
	dc, err := bigtable.NewClientWithConfig(ctx, "local", "local", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(dconn))
	if err != nil {
		return nil, nil, fmt.Errorf("bigtable client of the in-process emulator: %w", err)
	}
	aconn, err := b.dial()
	if err != nil {
		dc.Close()
		return nil, nil, err
	}
	ac, err := bigtable.NewAdminClient(ctx, "local", "local", option.WithGRPCConn(aconn))
	if err != nil {
		dc.Close()
		return nil, nil, fmt.Errorf("bigtable admin client of the in-process emulator: %w", err)
	}
	return dc, ac, nil
}
