package main

// The event log (one JSON object per line, appended, one write per line) and go-libp2p-pubsub's
// RawTracer turned into the contract's events. The tracer's callbacks come from several goroutines
// (the pubsub loop, one writer per peer), so lines are written under a lock.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"
)

type eventLog struct {
	mu     sync.Mutex
	file   *os.File
	prefix string // `,"node":"<id>","type":"`
	closed bool   // after `stop` nothing more is written: it is the log's last line
}

func openEventLog(path, node string) (*eventLog, error) {
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	quoted, _ := json.Marshal(node)
	return &eventLog{file: file, prefix: `,"node":` + string(quoted) + `,"type":"`}, nil
}

// emit writes one event: ts (unix ns, system clock), node, type, then the fields as name, value pairs.
func (l *eventLog) emit(kind string, fields ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(kind, fields)
}

// close writes its event last: nothing is logged after it.
func (l *eventLog) close(kind string, fields ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(kind, fields)
	l.closed = true
}

func (l *eventLog) write(kind string, fields []any) {
	if l.closed {
		return
	}
	line := make([]byte, 0, 192)
	line = append(line, `{"ts":`...)
	line = strconv.AppendInt(line, time.Now().UnixNano(), 10)
	line = append(line, l.prefix...)
	line = append(line, kind...)
	line = append(line, '"')
	for i := 0; i+1 < len(fields); i += 2 {
		value, err := json.Marshal(fields[i+1])
		if err != nil {
			value = []byte(strconv.Quote(fmt.Sprint(fields[i+1])))
		}
		line = append(line, `,"`...)
		line = append(line, fields[i].(string)...)
		line = append(line, `":`...)
		line = append(line, value...)
	}
	line = append(line, "}\n"...)
	if _, err := l.file.Write(line); err != nil { // O_APPEND, unbuffered: one write(2) per line
		fmt.Fprintf(os.Stderr, "event log: %v\n", err)
	}
}

// names turns peer ids into node ids (peer_ids), for origins and senders.
type names struct{ node map[peer.ID]string }

func newNames(peerIDs map[string]string) *names {
	n := &names{node: map[peer.ID]string{}}
	for node, id := range peerIDs {
		if pid, err := peer.Decode(id); err == nil {
			n.node[pid] = node
		}
	}
	return n
}

func (n *names) of(p peer.ID) string {
	if node, ok := n.node[p]; ok {
		return node
	}
	return p.String()
}

// label is a message's name in the log: its payload up to the first newline (the contract's format).
func label(data []byte) string {
	if end := bytes.IndexByte(data, '\n'); end >= 0 {
		return string(data[:end])
	}
	return string(data)
}

// tracer implements pubsub.RawTracer.
type tracer struct {
	log   *eventLog
	names *names
	self  peer.ID
}

var _ pubsub.RawTracer = (*tracer)(nil)

// DeliverMessage: the first copy of a message, validated (our own publications pass here too).
func (t *tracer) DeliverMessage(msg *pubsub.Message) {
	if msg.ReceivedFrom == t.self {
		return
	}
	t.log.emit("deliver_message", "topic", msg.GetTopic(), "msg_id", label(msg.GetData()),
		"origin", t.names.of(msg.GetFrom()), "peer", t.names.of(msg.ReceivedFrom), "size", len(msg.GetData()))
}

// DuplicateMessage: a later copy, with its sender.
func (t *tracer) DuplicateMessage(msg *pubsub.Message) {
	t.duplicate(msg)
}

func (t *tracer) duplicate(msg *pubsub.Message) {
	t.log.emit("duplicate_message", "topic", msg.GetTopic(), "msg_id", label(msg.GetData()),
		"peer", t.names.of(msg.ReceivedFrom), "size", len(msg.GetData()))
}

// RejectMessage: a copy of one of our own messages coming back is refused as "self origin" before
// the seen check; it is a duplicate like any other. Other rejections are not the contract's events:
// they are reported on stderr (a badly signed message from another implementation would show here).
func (t *tracer) RejectMessage(msg *pubsub.Message, reason string) {
	if reason == pubsub.RejectSelfOrigin {
		t.duplicate(msg)
		return
	}
	fmt.Fprintf(os.Stderr, "rejected %q from %s: %s\n", label(msg.GetData()), t.names.of(msg.ReceivedFrom), reason)
}

func (t *tracer) RecvRPC(rpc *pubsub.RPC) {
	t.log.emit("recv_rpc", rpcFields(t.names.of(rpc.From()), &rpc.RPC)...)
}

// SendRPCCompleted: an RPC written to the peer's stream (SendRPC is only its queueing).
func (t *tracer) SendRPCCompleted(rpc *pubsub.RPC, p peer.ID, _ time.Duration) {
	t.log.emit("send_rpc", rpcFields(t.names.of(p), &rpc.RPC)...)
}

func (t *tracer) Graft(p peer.ID, topic string) {
	t.log.emit("graft", "peer", t.names.of(p), "topic", topic)
}

func (t *tracer) Prune(p peer.ID, topic string) {
	t.log.emit("prune", "peer", t.names.of(p), "topic", topic)
}

func (t *tracer) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (t *tracer) OnClosedOutboundStream(peer.ID)           {}
func (t *tracer) Join(string)                              {}
func (t *tracer) Leave(string)                             {}
func (t *tracer) ValidateMessage(*pubsub.Message)          {}
func (t *tracer) ThrottlePeer(peer.ID)                     {}
func (t *tracer) SendRPC(*pubsub.RPC, peer.ID)             {}
func (t *tracer) DropRPC(*pubsub.RPC, peer.ID)             {}
func (t *tracer) UndeliverableMessage(*pubsub.Message)     {}

// rpcFields are send_rpc's and recv_rpc's fields, as peerlab's own node logs them: bytes (the
// encoded RPC, without its length prefix) and data_bytes always; message and subscription counts,
// and per control type the message ids (ihave, iwant, idontwant) or topics (graft, prune) with the
// bytes of those entries, only when there are some.
func rpcFields(peerName string, rpc *pb.RPC) []any {
	data := 0
	for _, m := range rpc.GetPublish() {
		data += len(m.GetData())
	}
	fields := []any{"peer", peerName, "bytes", proto.Size(rpc), "data_bytes", data}
	if n := len(rpc.GetPublish()); n > 0 {
		fields = append(fields, "msgs", n)
	}
	if n := len(rpc.GetSubscriptions()); n > 0 {
		fields = append(fields, "subs", n)
	}
	ctl := rpc.GetControl()
	for _, c := range []control{
		ids("ihave", ctl.GetIhave()), ids("iwant", ctl.GetIwant()), ids("idontwant", ctl.GetIdontwant()),
		topics("graft", ctl.GetGraft()), topics("prune", ctl.GetPrune()),
	} {
		if c.entries > 0 {
			fields = append(fields, c.kind, c.count, c.kind+"_bytes", c.bytes)
		}
	}
	return fields
}

// control sums the entries of one control type: how many, what they count, their encoded bytes.
type control struct {
	kind                  string
	entries, count, bytes int
}

// ids: IHAVE, IWANT and IDONTWANT count message ids.
func ids[E interface {
	proto.Message
	GetMessageIDs() []string
}](kind string, entries []E) control {
	c := control{kind: kind, entries: len(entries)}
	for _, e := range entries {
		c.count += len(e.GetMessageIDs())
		c.bytes += proto.Size(e)
	}
	return c
}

// topics: GRAFT and PRUNE count topics, one per entry.
func topics[E proto.Message](kind string, entries []E) control {
	c := control{kind: kind, entries: len(entries), count: len(entries)}
	for _, e := range entries {
		c.bytes += proto.Size(e)
	}
	return c
}

// sampleResources logs the process's CPU time (user + system) and resident memory every interval.
func sampleResources(ctx context.Context, log *eventLog, interval time.Duration) {
	page := int64(os.Getpagesize())
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		var usage syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err == nil {
			cpu := time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
			log.emit("resources", "cpu_s", cpu, "rss_bytes", residentPages()*page)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// residentPages is the second field of /proc/self/statm.
func residentPages() int64 {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, resident int64
	fmt.Sscan(string(raw), &size, &resident)
	return resident
}
