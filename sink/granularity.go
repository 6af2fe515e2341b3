package sink

import (
	"context"
	"fmt"
	"os"

	admin "cloud.google.com/go/bigtable/admin/apiv2"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellttl/cellttl/internal/waitfor"
)

// Granularity is the precision of the cell timestamps a table accepts,
// Bigtable's timestamp granularity, set when the table is created and
// never after. cellttl writes milliseconds (each timestamp a multiple of
// 1,000 µs), which both accept: it writes the same cells under either.
type Granularity string

const (
	// Millis is Bigtable's default: timestamps in whole milliseconds.
	Millis Granularity = "millis"
	// Micros accepts any microsecond.
	Micros Granularity = "micros"
)

// ParseGranularity reads millis or micros.
func ParseGranularity(s string) (Granularity, error) {
	switch g := Granularity(s); g {
	case Millis, Micros:
		return g, nil
	}
	return "", fmt.Errorf("%q: want millis or micros", s)
}

// Means says what cellttl does on a table of granularity g.
func (g Granularity) Means() string {
	if g == Micros {
		return "the table takes microseconds; cellttl's timestamps are whole milliseconds, valid under it, and written as under millis"
	}
	return "the table takes whole milliseconds, cellttl's timestamps"
}

func (g Granularity) proto() adminpb.Table_TimestampGranularity {
	if g == Micros {
		return adminpb.Table_MICROS
	}
	return adminpb.Table_MILLIS
}

func granularityOf(g adminpb.Table_TimestampGranularity) Granularity {
	if g == adminpb.Table_MICROS {
		return Micros
	}
	return Millis // unspecified is Bigtable's default, milliseconds
}

// TableAdmin is the part of Bigtable's table administration the client's
// AdminClient does not expose: a table's timestamp granularity.
type TableAdmin struct {
	c        *admin.BigtableTableAdminClient
	conn     *grpc.ClientConn // the emulator's, which the client does not close
	instance string           // projects/P/instances/I
}

// TableAdmin opens the table administration API of c's instance; on an
// emulator (BIGTABLE_EMULATOR_HOST), the emulator's, without credentials.
func (c TableConfig) TableAdmin(ctx context.Context) (*TableAdmin, error) {
	a := &TableAdmin{instance: "projects/" + c.Project + "/instances/" + c.Instance}
	var opts []option.ClientOption
	if host := os.Getenv("BIGTABLE_EMULATOR_HOST"); host != "" {
		conn, err := grpc.NewClient(host, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("connect to the Bigtable emulator at %s: %w", host, err)
		}
		a.conn = conn
		opts = append(opts, option.WithGRPCConn(conn))
	}
	var err error
	if a.c, err = admin.NewBigtableTableAdminClient(ctx, opts...); err != nil {
		if a.conn != nil {
			a.conn.Close()
		}
		return nil, fmt.Errorf("bigtable table admin client for %s/%s: %w", c.Project, c.Instance, err)
	}
	return a, nil
}

// Close closes the client and its connection.
func (a *TableAdmin) Close() error {
	err := a.c.Close()
	if a.conn != nil {
		a.conn.Close() // an error here is the client having closed it already
	}
	return err
}

// Granularity reads the timestamp granularity of table.
func (a *TableAdmin) Granularity(ctx context.Context, table string) (Granularity, error) {
	var t *adminpb.Table
	err := waitfor.Do(ctx, waitfor.Bigtable, "admin: read the timestamp granularity of "+table, func() (err error) {
		t, err = a.c.GetTable(ctx, &adminpb.GetTableRequest{Name: a.instance + "/tables/" + table, View: adminpb.Table_SCHEMA_VIEW})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read the timestamp granularity of %s: %w", table, err)
	}
	return granularityOf(t.GetGranularity()), nil
}

// CreateTable creates table, without families, of granularity g.
func (a *TableAdmin) CreateTable(ctx context.Context, table string, g Granularity) error {
	_, err := a.c.CreateTable(ctx, &adminpb.CreateTableRequest{Parent: a.instance, TableId: table, Table: &adminpb.Table{Granularity: g.proto()}})
	return err
}
