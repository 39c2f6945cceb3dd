package main

// The adapter's second mode: the gossipsub-interop contract (libp2p/test-plans, gossipsub-interop;
// docs/interop.md), so the same binary runs in their Shadow experiments and in peerlab through
// node/interop's shim.
//
//	go-libp2p-node --params params.json
//
// The host and library are the contract-1 mode's; what that contract fixes is done as it says: the node
// id from the host name `node<ID>`, the Ed25519 key seeded by the id (little endian), TCP port 9000,
// peers reached by their host names, messages unsigned with their first 8 bytes as id (big endian,
// logged in base 10), GossipSub's parameters by go-libp2p-pubsub's own names (times in nanoseconds),
// and stdout as JSON lines: `PeerID` at start, `Received Message` for every copy received. The
// script's instructions run in order; `waitUntil` counts whole seconds from the process's start.

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	libp2pnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

const (
	interopPort = 9000
	// how long a `connect` keeps trying a peer that refuses (it may start a moment later)
	interopConnectFor = 10 * time.Second
)

// instruction is one of the script's (their script_instruction.py); partial messages are refused.
type instruction struct {
	Type             string                     `json:"type"`
	ConnectTo        []int                      `json:"connectTo"`
	NodeID           int                        `json:"nodeID"`
	Instruction      *instruction               `json:"instruction"`
	ElapsedSeconds   int                        `json:"elapsedSeconds"`
	MessageID        uint64                     `json:"messageID"`
	MessageSizeBytes int                        `json:"messageSizeBytes"`
	TopicID          string                     `json:"topicID"`
	DelaySeconds     float64                    `json:"delaySeconds"`
	GossipSubParams  map[string]json.RawMessage `json:"gossipSubParams"`
}

type interopNode struct {
	id     int
	start  time.Time
	host   host.Host
	ps     *pubsub.PubSub
	out    *slog.Logger
	topics map[string]*pubsub.Topic
}

// interopKey is the contract's identity: an Ed25519 key whose seed is the node id, little endian.
func interopKey(id int) crypto.PrivKey {
	seed := make([]byte, ed25519.SeedSize)
	binary.LittleEndian.PutUint64(seed, uint64(id))
	key, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed))
	if err != nil {
		die("identity: %v", err)
	}
	return key
}

// interopMessageID is a message's first 8 bytes.
func interopMessageID(m *pb.Message) string {
	return string(m.Data[:min(8, len(m.Data))])
}

// interopParams sets go-libp2p-pubsub's GossipSubParams by the script's field names; a name the
// library has no field for, or a value that is not a number of the field's kind, is refused.
func interopParams(given map[string]json.RawMessage) (pubsub.GossipSubParams, error) {
	p := pubsub.DefaultGossipSubParams()
	fields := reflect.ValueOf(&p).Elem()
	for name, raw := range given {
		field := fields.FieldByName(name)
		if !field.IsValid() || !field.CanSet() {
			return p, fmt.Errorf("initGossipSub: go-libp2p-pubsub's GossipSubParams has no field %s", name)
		}
		if string(raw) == "null" {
			continue // the library's default
		}
		var value float64
		if err := json.Unmarshal(raw, &value); err != nil {
			return p, fmt.Errorf("initGossipSub: %s must be a number, not %s", name, raw)
		}
		whole := value == math.Trunc(value)
		switch field.Kind() {
		case reflect.Float64:
			field.SetFloat(value)
		case reflect.Int, reflect.Int64: // time.Duration is an int64 of nanoseconds
			if !whole {
				return p, fmt.Errorf("initGossipSub: %s must be a whole number, not %s", name, raw)
			}
			field.SetInt(int64(value))
		case reflect.Uint64:
			if !whole || value < 0 {
				return p, fmt.Errorf("initGossipSub: %s must be a whole number >= 0, not %s", name, raw)
			}
			field.SetUint(uint64(value))
		default:
			return p, fmt.Errorf("initGossipSub: %s is not a number in go-libp2p-pubsub", name)
		}
	}
	set := map[string]any{} // fitDefaults reads peerlab's names
	if _, ok := given["Dscore"]; ok {
		set["D_score"] = true
	}
	if _, ok := given["Dout"]; ok {
		set["D_out"] = true
	}
	fitDefaults(&p, set)
	return p, nil
}

// own returns the instruction meant for this node: ifNodeIDEquals unwrapped, or nil.
func (n *interopNode) own(in instruction) *instruction {
	for in.Type == "ifNodeIDEquals" {
		if in.NodeID != n.id || in.Instruction == nil {
			return nil
		}
		in = *in.Instruction
	}
	return &in
}

// copies logs every copy received, the first (DeliverMessage) and every later one (DuplicateMessage).
type copies struct{ out *slog.Logger }

func (c copies) log(m *pubsub.Message) {
	id := interopMessageID(m.Message)
	if len(id) == 8 {
		id = strconv.FormatUint(binary.BigEndian.Uint64([]byte(id)), 10)
	}
	c.out.Info("Received Message", "id", id, "from", m.ReceivedFrom.String(), "topic", m.GetTopic())
}
func (c copies) DeliverMessage(m *pubsub.Message)                     { c.log(m) }
func (c copies) DuplicateMessage(m *pubsub.Message)                   { c.log(m) }
func (c copies) AddPeer(peer.ID, protocol.ID)                         {}
func (c copies) RemovePeer(peer.ID)                                   {}
func (c copies) Join(string)                                          {}
func (c copies) Leave(string)                                         {}
func (c copies) Graft(peer.ID, string)                                {}
func (c copies) Prune(peer.ID, string)                                {}
func (c copies) ValidateMessage(*pubsub.Message)                      {}
func (c copies) RejectMessage(*pubsub.Message, string)                {}
func (c copies) ThrottlePeer(peer.ID)                                 {}
func (c copies) RecvRPC(*pubsub.RPC)                                  {}
func (c copies) SendRPC(*pubsub.RPC, peer.ID)                         {}
func (c copies) DropRPC(*pubsub.RPC, peer.ID)                         {}
func (c copies) UndeliverableMessage(*pubsub.Message)                 {}
func (c copies) OnNewOutboundStream(peer.ID, protocol.ID)             {}
func (c copies) OnClosedOutboundStream(peer.ID)                       {}
func (c copies) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}

// runInterop runs a params.json's script, then stays up until SIGTERM or SIGINT.
func runInterop(path string) {
	start := time.Now()
	var params struct {
		Script []instruction `json:"script"`
	}
	raw, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(raw, &params)
	}
	if err != nil {
		fail("params %s: %v", path, err)
	}
	hostname, _ := os.Hostname()
	n := &interopNode{start: start, topics: map[string]*pubsub.Topic{},
		out: slog.New(slog.NewJSONHandler(os.Stdout, nil))}
	if _, err := fmt.Sscanf(hostname, "node%d", &n.id); err != nil {
		fail("the host name %q is not node<ID> (the gossipsub-interop contract names every node so)", hostname)
	}
	gs := pubsub.DefaultGossipSubParams()
	for _, in := range params.Script {
		if own := n.own(in); own != nil && own.Type == "initGossipSub" {
			if gs, err = interopParams(own.GossipSubParams); err != nil {
				fail("%v", err)
			}
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	listen := libp2p.ListenAddrStrings(fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", interopPort))
	if n.host, err = libp2p.New(append(hostOptions(interopKey(n.id)), listen)...); err != nil {
		die("libp2p host on port %d: %v", interopPort, err)
	}
	n.out.Info("PeerID", "id", n.host.ID().String(), "node_id", n.id)
	n.ps, err = pubsub.NewGossipSub(ctx, n.host, pubsub.WithGossipSubParams(gs),
		pubsub.WithGossipSubProtocols(offered, pubsub.GossipSubDefaultFeatures),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign), pubsub.WithNoAuthor(),
		pubsub.WithMessageIdFn(interopMessageID), pubsub.WithRawTracer(copies{n.out}))
	if err != nil {
		fail("go-libp2p-pubsub refused the script's initGossipSub: %v", err)
	}
	for index, in := range params.Script {
		if own := n.own(in); own != nil {
			if err := n.run(ctx, *own); err != nil {
				fail("script[%d]: %v", index, err)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	<-ctx.Done()
	closeHost(n.host, 3*time.Second)
}

func (n *interopNode) run(ctx context.Context, in instruction) error {
	switch in.Type {
	case "initGossipSub":
		return nil // read before the host started
	case "connect":
		n.connect(ctx, in.ConnectTo)
	case "waitUntil":
		sleep(ctx, time.Until(n.start.Add(time.Duration(in.ElapsedSeconds)*time.Second)))
	case "subscribeToTopic":
		sub, err := n.topic(in.TopicID).Subscribe()
		if err != nil {
			return err
		}
		go func() { // drained: the tracer logs the copies
			for {
				if _, err := sub.Next(ctx); err != nil {
					return
				}
			}
		}()
	case "setTopicValidationDelay":
		delay := time.Duration(in.DelaySeconds * float64(time.Second))
		return n.ps.RegisterTopicValidator(in.TopicID, func(context.Context, peer.ID, *pubsub.Message) bool {
			time.Sleep(delay)
			return true
		})
	case "publish":
		data := make([]byte, max(in.MessageSizeBytes, 8))
		binary.BigEndian.PutUint64(data, in.MessageID)
		if err := n.topic(in.TopicID).Publish(ctx, data); err != nil {
			fmt.Fprintf(os.Stderr, "publish %d: %v\n", in.MessageID, err)
		}
	default:
		return fmt.Errorf("instruction %q: this adapter runs connect, ifNodeIDEquals, waitUntil, "+
			"subscribeToTopic, setTopicValidationDelay, initGossipSub and publish", in.Type)
	}
	return nil
}

func (n *interopNode) topic(name string) *pubsub.Topic {
	t, ok := n.topics[name]
	if !ok {
		var err error
		if t, err = n.ps.Join(name); err != nil {
			fail("join %s: %v", name, err)
		}
		n.topics[name] = t
	}
	return t
}

// connect dials the nodes at once and returns when each is connected or has refused for
// interopConnectFor (said on stderr; the script goes on).
func (n *interopNode) connect(ctx context.Context, targets []int) {
	var wg sync.WaitGroup
	for _, target := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.dial(ctx, target); err != nil {
				fmt.Fprintf(os.Stderr, "connect to node%d: %v\n", target, err)
			}
		}()
	}
	wg.Wait()
}

func (n *interopNode) dial(ctx context.Context, target int) error {
	id, err := peer.IDFromPrivateKey(interopKey(target))
	if err != nil {
		return err
	}
	deadline, backoff := time.Now().Add(interopConnectFor), dialBackoffFirst
	for {
		var addrs []string
		if addrs, err = net.LookupHost(fmt.Sprintf("node%d", target)); err == nil {
			var info *peer.AddrInfo
			info, err = peer.AddrInfoFromString(fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", addrs[0], interopPort, id))
			if err == nil {
				dialCtx, cancel := context.WithTimeout(libp2pnet.WithForceDirectDial(ctx, "script"), dialTimeout)
				err = n.host.Connect(dialCtx, *info)
				cancel()
			}
		}
		if err == nil || time.Now().After(deadline) || !sleep(ctx, backoff) {
			return err
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
}
