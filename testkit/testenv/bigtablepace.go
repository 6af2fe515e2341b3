package testenv

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// readPace is how a BigtableProxy relays the answers of ReadRows calls on
// one table (SetReadRowsPace).
type readPace struct {
	table     string
	every     time.Duration
	holdAfter int
}

// SetReadRowsPace relays each answer of a ReadRows call on table (a row,
// as the emulator sends them) every apart; after holdAfter answers (0:
// never) it holds the call unanswered until the client gives up on it: a
// scan slow but answering, or one that stops. An empty table relays every
// call as it comes again.
func (p *BigtableProxy) SetReadRowsPace(table string, every time.Duration, holdAfter int) {
	if table == "" {
		p.pace.Store(nil)
		return
	}
	p.pace.Store(&readPace{table: table, every: every, holdAfter: holdAfter})
}

// SetReadRowsFault refuses every ReadRows call on table with err, before
// the emulator sees it: a table that cannot answer for a while, its rows
// intact. An empty table clears it.
func (p *BigtableProxy) SetReadRowsFault(table string, err error) {
	if table == "" {
		p.readFault.Store(nil)
		return
	}
	p.readFault.Store(&readFault{table: table, err: err})
}

// readFault is a refusal of the ReadRows calls on one table
// (SetReadRowsFault).
type readFault struct {
	table string
	err   error
}

// readRows relays one ReadRows call, paced when it reads pace's table.
func (p *BigtableProxy) readRows(ctx context.Context, ss grpc.ServerStream, method string, pace *readPace, fault *readFault) error {
	var raw []byte
	if err := ss.RecvMsg(&raw); err != nil {
		return err
	}
	req := &btpb.ReadRowsRequest{}
	decoded := proto.Unmarshal(raw, req) == nil
	if fault != nil && decoded && strings.HasSuffix(req.TableName, "/tables/"+fault.table) {
		return fault.err
	}
	paced := pace != nil && decoded && strings.HasSuffix(req.TableName, "/tables/"+pace.table)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := p.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(&raw); err != nil {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for n := 0; ; n++ {
		var m []byte
		if err := cs.RecvMsg(&m); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if paced {
			if pace.holdAfter > 0 && n >= pace.holdAfter {
				<-ctx.Done()
				return ctx.Err()
			}
			select {
			case <-time.After(pace.every):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}
