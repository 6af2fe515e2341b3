package testenv

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// MutateRowsFault decides the fate of one MutateRows request passing
// through a BigtableProxy. A non-nil Refuse fails the request as a whole,
// before the emulator sees it. Otherwise each entry for which Entry returns
// a code other than OK is refused with that code while the others are
// written, as Bigtable refuses a row on its own. A non-nil LostReply is
// what the client gets instead of the answer of a request the emulator
// applied: a reply lost on the way.
type MutateRowsFault struct {
	Refuse    error
	Entry     func(key []byte) codes.Code
	LostReply error
}

// BigtableProxy is a gRPC proxy in front of a Bigtable emulator that
// forwards every call unchanged, except the calls a fault or pace set
// meanwhile applies to. Clients reach it as they reach the emulator: BIGTABLE_EMULATOR_HOST.
type BigtableProxy struct {
	Addr  string
	fault atomic.Pointer[func(*btpb.MutateRowsRequest) MutateRowsFault]
	// condLost is what a CheckAndMutateRow call the emulator applied is
	// answered with, while set (SetCondLostReply).
	condLost atomic.Pointer[error]
	// condFault decides each CheckAndMutateRow call while set
	// (SetCondFault).
	condFault atomic.Pointer[func() error]
	pace      atomic.Pointer[readPace]
	readFault atomic.Pointer[readFault]
	calls     atomic.Int64
	server    *grpc.Server
	conn      *grpc.ClientConn
}

// StartBigtableProxy starts a proxy in front of upstream; it stops with the
// test.
func StartBigtableProxy(t testing.TB, upstream string) *BigtableProxy {
	t.Helper()
	p, err := NewBigtableProxy(upstream)
	if err != nil {
		t.Fatalf("start Bigtable proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewBigtableProxy starts a proxy in front of upstream; Close stops it.
func NewBigtableProxy(upstream string) (*BigtableProxy, error) {
	conn, err := grpc.NewClient(upstream, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		conn.Close()
		return nil, err
	}
	p := &BigtableProxy{Addr: l.Addr().String(), conn: conn}
	p.server = grpc.NewServer(grpc.UnknownServiceHandler(p.handle), grpc.ForceServerCodecV2(rawCodec{}), grpc.MaxRecvMsgSize(1<<30))
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

// SetFault applies f to every MutateRows request from now on; nil clears it.
func (p *BigtableProxy) SetFault(f func(*btpb.MutateRowsRequest) MutateRowsFault) {
	if f == nil {
		p.fault.Store(nil)
		return
	}
	p.fault.Store(&f)
}

// SetCondLostReply makes every CheckAndMutateRow call from now on reach
// the emulator, which applies it, and answers it with err instead of the
// emulator's answer: a reply lost on the way. nil clears it.
func (p *BigtableProxy) SetCondLostReply(err error) {
	if err == nil {
		p.condLost.Store(nil)
		return
	}
	p.condLost.Store(&err)
}

// SetCondFault makes every CheckAndMutateRow call from now on ask f: a
// call f answers with an error gets that error, and never reaches the
// emulator (a refusal: nothing applied); nil lets it through. nil clears
// it.
func (p *BigtableProxy) SetCondFault(f func() error) {
	if f == nil {
		p.condFault.Store(nil)
		return
	}
	p.condFault.Store(&f)
}

// MutateRowsCalls counts the MutateRows calls seen.
func (p *BigtableProxy) MutateRowsCalls() int64 { return p.calls.Load() }

// Close stops the proxy.
func (p *BigtableProxy) Close() {
	p.server.Stop()
	p.conn.Close()
}

func (p *BigtableProxy) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	ctx := metadata.NewOutgoingContext(ss.Context(), md.Copy())
	if strings.HasSuffix(method, "/MutateRows") {
		p.calls.Add(1)
		if f := p.fault.Load(); f != nil {
			return p.mutateRows(ctx, ss, method, *f)
		}
	}
	if f := p.condFault.Load(); f != nil && strings.HasSuffix(method, "/CheckAndMutateRow") {
		if refused := (*f)(); refused != nil {
			var req []byte
			if err := ss.RecvMsg(&req); err != nil {
				return err
			}
			return refused
		}
	}
	if lost := p.condLost.Load(); lost != nil && strings.HasSuffix(method, "/CheckAndMutateRow") {
		var req, reply []byte
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		if err := p.conn.Invoke(ctx, method, &req, &reply); err != nil {
			return err
		}
		return *lost
	}
	if pace, fault := p.pace.Load(), p.readFault.Load(); (pace != nil || fault != nil) && strings.HasSuffix(method, "/ReadRows") {
		return p.readRows(ctx, ss, method, pace, fault)
	}
	return p.forward(ctx, ss, method)
}

// forward relays a call of any shape in both directions.
func (p *BigtableProxy) forward(ctx context.Context, ss grpc.ServerStream, method string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := p.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	sent := make(chan error, 1)
	go func() {
		for {
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				if errors.Is(err, io.EOF) {
					sent <- cs.CloseSend()
				} else {
					sent <- err
				}
				return
			}
			if err := cs.SendMsg(&m); err != nil {
				sent <- err
				return
			}
		}
	}()
	if md, err := cs.Header(); err == nil {
		_ = ss.SendHeader(md)
	}
	for {
		var m []byte
		if err := cs.RecvMsg(&m); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}

// mutateRows applies a fault to one MutateRows call.
func (p *BigtableProxy) mutateRows(ctx context.Context, ss grpc.ServerStream, method string, fault func(*btpb.MutateRowsRequest) MutateRowsFault) error {
	var raw []byte
	if err := ss.RecvMsg(&raw); err != nil {
		return err
	}
	req := &btpb.MutateRowsRequest{}
	if err := proto.Unmarshal(raw, req); err != nil {
		return status.Errorf(codes.Internal, "proxy: decode MutateRows: %v", err)
	}
	f := fault(req)
	if f.Refuse != nil {
		return f.Refuse
	}
	// Forward the entries not refused; answer for all of them.
	results := make([]*btpb.MutateRowsResponse_Entry, len(req.Entries))
	var kept []*btpb.MutateRowsRequest_Entry
	var keptIndex []int
	for i, e := range req.Entries {
		if f.Entry != nil {
			if c := f.Entry(e.RowKey); c != codes.OK {
				results[i] = &btpb.MutateRowsResponse_Entry{Index: int64(i), Status: &statuspb.Status{Code: int32(c), Message: "refused by the test proxy"}}
				continue
			}
		}
		kept = append(kept, e)
		keptIndex = append(keptIndex, i)
	}
	if len(kept) > 0 {
		fwd := proto.Clone(req).(*btpb.MutateRowsRequest)
		fwd.Entries = kept
		out, err := proto.Marshal(fwd)
		if err != nil {
			return err
		}
		cs, err := p.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
		if err != nil {
			return err
		}
		if err := cs.SendMsg(&out); err != nil {
			return err
		}
		if err := cs.CloseSend(); err != nil {
			return err
		}
		for {
			var m []byte
			if err := cs.RecvMsg(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
			res := &btpb.MutateRowsResponse{}
			if err := proto.Unmarshal(m, res); err != nil {
				return err
			}
			for _, e := range res.Entries {
				i := keptIndex[e.Index]
				results[i] = &btpb.MutateRowsResponse_Entry{Index: int64(i), Status: e.Status}
			}
		}
	}
	if f.LostReply != nil {
		return f.LostReply
	}
	out, err := proto.Marshal(&btpb.MutateRowsResponse{Entries: results})
	if err != nil {
		return err
	}
	return ss.SendMsg(&out)
}

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
