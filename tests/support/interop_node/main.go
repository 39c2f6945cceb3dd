// A GossipSub node that speaks only the gossipsub-interop contract (libp2p/test-plans,
// gossipsub-interop/test-specs/implementation.md), written from that text and nothing of peerlab's:
// peerlab's tests run it to show that a binary made for that contract runs unchanged in a peerlab
// scenario (node/interop/ is the other side).
//
//	interop-test-node --params params.json
//
// What the contract asks, and where it is done here:
//   - its node id from the host name `node<ID>`; its Ed25519 key seeded by the id, little endian;
//   - it listens on TCP port 9000 and reaches node<N> by resolving that name;
//   - it runs the script of params.json (instruction types as the contract's script_instruction.py);
//   - a message's id is its first 8 bytes as a big-endian uint64, written in base 10;
//   - stdout carries JSON lines only: `PeerID` at start, `Received Message` for every copy received.
//
// As strict as the contract's reference binaries, no kinder: it dials each peer of a `connect` once,
// without retrying, and exits 1 if a dial fails (a peer not listening yet, or gone); it exits 0 as
// soon as its script ends (a runner ends every experiment with a `waitUntil` for that reason); SIGTERM
// ends it earlier.
package main

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

const port = 9000

type instruction struct {
	Type             string          `json:"type"`
	ConnectTo        []int           `json:"connectTo"`
	NodeID           int             `json:"nodeID"`
	Instruction      *instruction    `json:"instruction"`
	ElapsedSeconds   int             `json:"elapsedSeconds"`
	MessageID        uint64          `json:"messageID"`
	MessageSizeBytes int             `json:"messageSizeBytes"`
	TopicID          string          `json:"topicID"`
	DelaySeconds     float64         `json:"delaySeconds"`
	GossipSubParams  map[string]any  `json:"gossipSubParams"`
	Partial          bool            `json:"partial"`
	Parts            json.RawMessage `json:"parts"`
}

type node struct {
	id     int
	start  time.Time
	dial   func(ctx context.Context, target int) error
	ps     *pubsub.PubSub
	topics map[string]*pubsub.Topic
	out    *slog.Logger
}

func key(id int) crypto.PrivKey {
	seed := make([]byte, ed25519.SeedSize)
	binary.LittleEndian.PutUint64(seed, uint64(id))
	k, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed))
	if err != nil {
		panic(err)
	}
	return k
}

func messageID(m *pb.Message) string {
	if len(m.Data) < 8 {
		return string(m.Data)
	}
	return string(m.Data[:8])
}

func decimal(id string) string {
	if len(id) < 8 {
		return id
	}
	return strconv.FormatUint(binary.BigEndian.Uint64([]byte(id)), 10)
}

// copies logs every copy received: the first (DeliverMessage) and every later one (DuplicateMessage).
type copies struct{ out *slog.Logger }

func (c copies) log(m *pubsub.Message) {
	c.out.Info("Received Message", "id", decimal(messageID(m.Message)), "from", m.ReceivedFrom.String(),
		"topic", m.GetTopic())
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

// gossipParams sets go-libp2p-pubsub's GossipSubParams from the instruction's (the same names; times in
// nanoseconds).
func gossipParams(given map[string]any) pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	ints := map[string]*int{"D": &p.D, "Dlo": &p.Dlo, "Dhi": &p.Dhi, "Dscore": &p.Dscore, "Dout": &p.Dout,
		"HistoryLength": &p.HistoryLength, "HistoryGossip": &p.HistoryGossip, "Dlazy": &p.Dlazy,
		"GossipRetransmission": &p.GossipRetransmission, "PrunePeers": &p.PrunePeers,
		"MaxIHaveLength": &p.MaxIHaveLength, "MaxIHaveMessages": &p.MaxIHaveMessages,
		"MaxIDontWantMessages": &p.MaxIDontWantMessages, "IDontWantMessageThreshold": &p.IDontWantMessageThreshold,
		"IDontWantMessageTTL": &p.IDontWantMessageTTL, "MaxIDontWantLength": &p.MaxIDontWantLength,
		"OpportunisticGraftPeers": &p.OpportunisticGraftPeers}
	durations := map[string]*time.Duration{"HeartbeatInitialDelay": &p.HeartbeatInitialDelay,
		"HeartbeatInterval": &p.HeartbeatInterval, "FanoutTTL": &p.FanoutTTL, "PruneBackoff": &p.PruneBackoff,
		"UnsubscribeBackoff": &p.UnsubscribeBackoff, "IWantFollowupTime": &p.IWantFollowupTime,
		"GraftFloodThreshold": &p.GraftFloodThreshold}
	for name, value := range given {
		number, ok := value.(float64)
		if !ok {
			continue // null: the default stands
		}
		switch {
		case name == "GossipFactor":
			p.GossipFactor = number
		case name == "OpportunisticGraftTicks":
			p.OpportunisticGraftTicks = uint64(number)
		case name == "DirectConnectTicks":
			p.DirectConnectTicks = uint64(number)
		case durations[name] != nil:
			*durations[name] = time.Duration(number)
		case ints[name] != nil:
			*ints[name] = int(number)
		}
	}
	return p
}

func (n *node) topic(name string) *pubsub.Topic {
	t, ok := n.topics[name]
	if !ok {
		var err error
		if t, err = n.ps.Join(name); err != nil {
			panic(err)
		}
		n.topics[name] = t
	}
	return t
}

func (n *node) run(ctx context.Context, in instruction) error {
	switch in.Type {
	case "initGossipSub":
		return nil // done before the script runs (its parameters are read there)
	case "connect":
		for _, target := range in.ConnectTo {
			if err := n.dial(ctx, target); err != nil {
				return err
			}
		}
	case "ifNodeIDEquals":
		if in.NodeID == n.id && in.Instruction != nil {
			return n.run(ctx, *in.Instruction)
		}
	case "waitUntil":
		select { // messages are still handled meanwhile: pubsub runs on its own goroutines
		case <-time.After(time.Until(n.start.Add(time.Duration(in.ElapsedSeconds) * time.Second))):
		case <-ctx.Done():
		}
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
		return fmt.Errorf("instruction %q is not supported by this node", in.Type)
	}
	return nil
}

func initParams(script []instruction, id int) map[string]any {
	for _, in := range script {
		if in.Type == "ifNodeIDEquals" && in.NodeID == id && in.Instruction != nil {
			in = *in.Instruction
		}
		if in.Type == "initGossipSub" {
			return in.GossipSubParams
		}
	}
	return nil
}

func main() {
	start := time.Now()
	paramsPath := flag.String("params", "", "the experiment's params.json")
	flag.Parse()
	var params struct {
		Script []instruction `json:"script"`
	}
	raw, err := os.ReadFile(*paramsPath)
	if err == nil {
		err = json.Unmarshal(raw, &params)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "params: %v\n", err)
		os.Exit(2)
	}
	hostname, _ := os.Hostname()
	var id int
	if _, err := fmt.Sscanf(hostname, "node%d", &id); err != nil {
		fmt.Fprintf(os.Stderr, "host name %q is not node<ID>\n", hostname)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	h, err := libp2p.New(libp2p.Identity(key(id)), libp2p.ListenAddrStrings(fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", port)))
	if err != nil {
		panic(err)
	}
	out := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	out.Info("PeerID", "id", h.ID().String(), "node_id", id)
	ps, err := pubsub.NewGossipSub(ctx, h,
		pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign), pubsub.WithNoAuthor(),
		pubsub.WithMessageIdFn(messageID), pubsub.WithGossipSubParams(gossipParams(initParams(params.Script, id))),
		pubsub.WithRawTracer(copies{out}), pubsub.WithMaxMessageSize(10<<20))
	if err != nil {
		panic(err)
	}
	n := &node{id: id, start: start, ps: ps, topics: map[string]*pubsub.Topic{}, out: out}
	n.dial = func(ctx context.Context, target int) error {
		pid, err := peer.IDFromPrivateKey(key(target))
		if err != nil {
			return err
		}
		addrs, err := net.LookupHost(fmt.Sprintf("node%d", target))
		if err != nil {
			return fmt.Errorf("connect to node%d: %w", target, err)
		}
		info, _ := peer.AddrInfoFromString(fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", addrs[0], port, pid))
		if err := h.Connect(ctx, *info); err != nil {
			return fmt.Errorf("connect to node%d: %w", target, err)
		}
		return nil
	}
	for _, in := range params.Script {
		if err := n.run(ctx, in); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if ctx.Err() != nil {
			break
		}
	}
	h.Close() // the script is over (or SIGTERM came): the node leaves
}
