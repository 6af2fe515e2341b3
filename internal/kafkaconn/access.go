package kafkaconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/segmentio/kafka-go/protocol/saslauthenticate"
	"github.com/segmentio/kafka-go/protocol/saslhandshake"
	"github.com/segmentio/kafka-go/sasl"
)

// Kafka's ACL operations, as bits of a topic's authorized operations.
const (
	opAll   = 2
	opWrite = 4
	// opsUnknown is what a broker answers when it does not say.
	opsUnknown = -2147483648
)

// MayWrite asks a broker whether this principal may write to topic, from
// the topic's authorized operations (Metadata v8, KIP-430). It answers
// known=false when the broker does not say. The Transport serves metadata
// from its cache and never asks for these, so this opens one connection of
// its own, set up the way the Transport sets up its own: TLS, API
// versions, SASL.
func (s Security) MayWrite(ctx context.Context, brokers []string, topic string) (ok, known bool, err error) {
	pc, _, err := s.rawConn(ctx, brokers)
	if err != nil {
		return false, false, err
	}
	defer pc.Close()
	res, err := pc.RoundTrip(&metadata.Request{TopicNames: []string{topic}, IncludeTopicAuthorizedOperations: true})
	if err != nil {
		return false, false, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	for _, t := range res.(*metadata.Response).Topics {
		if t.Name != topic {
			continue
		}
		if t.ErrorCode != 0 {
			return false, false, fmt.Errorf("metadata of %s: %w", topic, kafka.Error(t.ErrorCode))
		}
		ops := t.TopicAuthorizedOperations
		if ops == opsUnknown || ops == 0 {
			return false, false, nil
		}
		return ops&(1<<opWrite|1<<opAll) != 0, true, nil
	}
	return false, false, fmt.Errorf("metadata of %s: topic not in the answer", topic)
}

// rawConn connects to the first broker that answers, and returns the
// newest version of each API the broker serves.
func (s Security) rawConn(ctx context.Context, brokers []string) (*protocol.Conn, map[protocol.ApiKey]int16, error) {
	tlsCfg, mech, err := s.parts()
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, addr := range brokers {
		pc, newest, err := dialRaw(ctx, addr, tlsCfg, mech)
		if err == nil {
			return pc, newest, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, nil, errors.Join(errs...)
}

func dialRaw(ctx context.Context, addr string, tlsCfg *tls.Config, mech sasl.Mechanism) (*protocol.Conn, map[protocol.ApiKey]int16, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	// A connection's reads know no context: the caller's ending (a
	// command's wait that ran out) ends them. Stopped before cancel runs.
	defer context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })()
	if tlsCfg != nil {
		cfg := tlsCfg.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		nc = tls.Client(nc, cfg)
	}
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	pc := protocol.NewConn(nc, "cellttl")
	res, err := pc.RoundTrip(new(apiversions.Request))
	if err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("API versions: %w", err)
	}
	versions, newest := map[protocol.ApiKey]int16{}, map[protocol.ApiKey]int16{}
	for _, k := range res.(*apiversions.Response).ApiKeys {
		key := protocol.ApiKey(k.ApiKey)
		versions[key], newest[key] = key.SelectVersion(k.MinVersion, k.MaxVersion), k.MaxVersion
	}
	pc.SetVersions(versions)
	if mech != nil {
		if err := authenticate(ctx, pc, mech, addr); err != nil {
			pc.Close()
			return nil, nil, fmt.Errorf("SASL %s: %w", mech.Name(), err)
		}
	}
	return pc, newest, nil
}

// authenticate runs a SASL exchange as kafka-go's Transport does.
func authenticate(ctx context.Context, pc *protocol.Conn, mech sasl.Mechanism, addr string) error {
	res, err := pc.RoundTrip(&saslhandshake.Request{Mechanism: mech.Name()})
	if err != nil {
		return err
	}
	if code := res.(*saslhandshake.Response).ErrorCode; code != 0 {
		return kafka.Error(code)
	}
	host, port, _ := net.SplitHostPort(addr)
	var portN int
	_, _ = fmt.Sscan(port, &portN)
	sess, state, err := mech.Start(sasl.WithMetadata(ctx, &sasl.Metadata{Host: host, Port: portN}))
	if err != nil {
		return err
	}
	for done := false; !done; {
		res, err := pc.RoundTrip(&saslauthenticate.Request{AuthBytes: state})
		if err != nil {
			if errors.Is(err, io.EOF) {
				return kafka.SASLAuthenticationFailed
			}
			return err
		}
		r := res.(*saslauthenticate.Response)
		if r.ErrorCode != 0 {
			return kafka.Error(r.ErrorCode)
		}
		if done, state, err = sess.Next(ctx, r.AuthBytes); err != nil {
			return err
		}
	}
	return nil
}
