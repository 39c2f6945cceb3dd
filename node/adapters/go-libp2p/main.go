// peerlab node contract v1 (docs/node-contract.md) for go-libp2p's GossipSub (go-libp2p-pubsub).
//
//	go-libp2p-node --config FILE
//	go-libp2p-node --params params.json   (gossipsub-interop's contract: interop.go)
//
// Reads the contract config, starts a go-libp2p host (TCP, Noise, Yamux only) with the identity
// derived from the config's seed, dials the planned peers and keeps those connections (a dropped one
// is redialled, as peerlab's own node does), subscribes, publishes the schedule from T0 and writes the
// contract's events as JSON lines. SIGTERM (or SIGINT) stops it cleanly.
//
// Everything it logs comes from go-libp2p-pubsub's public RawTracer (first copies, duplicates with
// their sender, every RPC received and written, grafts and prunes) and the network's connection
// notifications, so nothing private is wrapped; go.sum still pins every module.
//
// The files: main.go (config, identity, lifecycle, schedule), params.go (peerlab's GossipSub
// parameters -> go-libp2p-pubsub's options), validate.go (validation as a wait or as CPU work),
// events.go (the event log and the tracer), peers.go (the host, connections and dialling), interop.go
// (the gossipsub-interop mode).
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// config is the contract's config (node/contract.py ContractConfig); fields this node does not use
// (run_id, seed, neighbours, implementation) are left out.
type config struct {
	Contract          int                 `json:"contract"`
	NodeID            string              `json:"node_id"`
	Protocol          string              `json:"protocol"`
	Params            map[string]any      `json:"params"`
	IdentitySeed      string              `json:"identity_seed"`
	PeerIDs           map[string]string   `json:"peer_ids"`
	Listen            address             `json:"listen"`
	Peers             map[string]address  `json:"peers"`
	Dial              []string            `json:"dial"`
	Subscriptions     []string            `json:"subscriptions"`
	LateSubscriptions [][]json.RawMessage `json:"late_subscriptions"` // [seconds after T0, topic]
	Schedule          [][]json.RawMessage `json:"schedule"`           // [seconds after T0, topic, bytes]
	T0Ns              *int64              `json:"t0_ns"`
	EventLog          string              `json:"event_log"`
	ResourcesInterval *float64            `json:"resources_interval"`

	publications []publication // Schedule and LateSubscriptions, read
	late         []lateSub
}

type address struct {
	Host   string `json:"host"`
	Port   int    `json:"port"`
	PeerID string `json:"peer_id"`
}

// publication is one entry of the schedule; lateSub one of late_subscriptions.
type publication struct {
	offset float64
	topic  string
	size   int
}

type lateSub struct {
	offset float64
	topic  string
}

// fail reports a config the node cannot run and exits 2 (before anything starts).
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-libp2p adapter: "+format+"\n", args...)
	os.Exit(2)
}

// die reports what kept a valid config from running (no event log, no address to listen on): exit 1.
func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-libp2p adapter: "+format+"\n", args...)
	os.Exit(1)
}

func loadConfig(path string) *config {
	raw, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	cfg := &config{}
	if err := json.Unmarshal(raw, cfg); err != nil {
		fail("config %s: %v", path, err)
	}
	if cfg.Contract != 1 {
		fail("the adapter speaks contract 1, the config is contract %d", cfg.Contract)
	}
	if cfg.T0Ns == nil {
		fail("config %s has no t0_ns (an adapter node is given T0 in its config)", path)
	}
	cfg.publications, cfg.late = cfg.schedule(), cfg.lateSubscriptions()
	return cfg
}

func (c *config) schedule() []publication {
	out := make([]publication, len(c.Schedule))
	for i, entry := range c.Schedule {
		if len(entry) != 3 || json.Unmarshal(entry[0], &out[i].offset) != nil ||
			json.Unmarshal(entry[1], &out[i].topic) != nil || json.Unmarshal(entry[2], &out[i].size) != nil {
			fail("schedule[%d]: expected [seconds, topic, bytes]", i)
		}
	}
	return out
}

func (c *config) lateSubscriptions() []lateSub {
	out := make([]lateSub, len(c.LateSubscriptions))
	for i, entry := range c.LateSubscriptions {
		if len(entry) != 2 || json.Unmarshal(entry[0], &out[i].offset) != nil || json.Unmarshal(entry[1], &out[i].topic) != nil {
			fail("late_subscriptions[%d]: expected [seconds, topic]", i)
		}
	}
	return out
}

// identity is the Ed25519 key of the config's seed; its peer id must be the one the planner gave
// every other node (peer_ids[node_id]), or this node's messages would be named by nobody.
func identity(c *config) crypto.PrivKey {
	seed, err := hex.DecodeString(c.IdentitySeed)
	if err != nil || len(seed) != ed25519.SeedSize {
		fail("identity_seed must be %d bytes of hex", ed25519.SeedSize)
	}
	key, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed))
	if err != nil {
		fail("identity: %v", err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		fail("identity: %v", err)
	}
	if want := c.PeerIDs[c.NodeID]; id.String() != want {
		fail("identity_seed gives peer id %s, but peer_ids[%s] is %q", id, c.NodeID, want)
	}
	return key
}

// node is the running adapter.
type node struct {
	cfg   *config
	log   *eventLog
	names *names
	net   *network
	ps    *pubsub.PubSub

	validation validation

	mu     sync.Mutex
	topics map[string]*pubsub.Topic
	timers []*time.Timer
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "--params" {
		runInterop(os.Args[2])
		return
	}
	if len(os.Args) != 3 || os.Args[1] != "--config" {
		fmt.Fprintln(os.Stderr, "usage: go-libp2p-node --config FILE      (peerlab's node contract 1)\n"+
			"       go-libp2p-node --params params.json  (gossipsub-interop's contract, host name node<ID>)")
		os.Exit(2)
	}
	signals := make(chan os.Signal, 1) // from the start: a stop during start-up still logs `stop`
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	cfg := loadConfig(os.Args[2])
	key := identity(cfg)
	options, validation := gossipOptions(cfg.Params) // an unknown or unusable parameter exits 2 here
	log, err := openEventLog(cfg.EventLog, cfg.NodeID)
	if err != nil {
		die("event log: %v", err)
	}
	n := &node{cfg: cfg, log: log, names: newNames(cfg.PeerIDs), topics: map[string]*pubsub.Topic{},
		validation: validation}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n.net, err = newNetwork(ctx, key, n.log, n.names)
	if err != nil {
		die("libp2p host: %v", err)
	}
	options = append(options, pubsub.WithRawTracer(&tracer{log: n.log, names: n.names, self: n.net.host.ID()}))
	if n.ps, err = pubsub.NewGossipSub(ctx, n.net.host, options...); err != nil {
		n.net.host.Close()
		fail("go-libp2p-pubsub refused the parameters (its Dlo, Dhi, Dout, Dscore are D_lo, D_hi, D_out, "+
			"D_score): %v", err)
	}
	if err := n.net.listen(cfg.Listen.Host, cfg.Listen.Port); err != nil {
		die("listen on %s:%d: %v", cfg.Listen.Host, cfg.Listen.Port, err)
	}
	n.run(ctx)
	n.stop(<-signals)
}

// run logs start, joins the topics, schedules the publications and late subscriptions from T0 and
// starts dialling; then the node is ready.
func (n *node) run(ctx context.Context) {
	n.log.emit("start", "protocol", n.cfg.Protocol)
	n.log.emit("behaviour", "behaviour", "honest")
	for _, topic := range n.cfg.Subscriptions {
		n.subscribe(ctx, topic)
	}
	t0 := time.Unix(0, *n.cfg.T0Ns)
	n.log.emit("t0", "t0", *n.cfg.T0Ns)
	for index, p := range n.cfg.publications {
		at := t0.Add(seconds(p.offset))
		if at.Before(time.Now()) {
			continue // a restarted node skips what it missed
		}
		n.at(at, func() { n.publish(ctx, index+1, p.topic, p.size) })
	}
	for _, s := range n.cfg.late {
		n.at(t0.Add(seconds(s.offset)), func() { n.subscribe(ctx, s.topic) })
	}
	for _, id := range n.cfg.Dial {
		peerAddr, ok := n.cfg.Peers[id]
		if !ok {
			fmt.Fprintf(os.Stderr, "dial %s: not in the config's peers\n", id)
			continue
		}
		go n.net.keep(ctx, id, peerAddr)
	}
	if interval := n.resourcesInterval(); interval > 0 {
		go sampleResources(ctx, n.log, interval)
	}
	n.log.emit("ready")
}

// at runs fn at `when` (at once if that has passed).
func (n *node) at(when time.Time, fn func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.timers = append(n.timers, time.AfterFunc(time.Until(when), fn))
}

func (n *node) topic(name string) (*pubsub.Topic, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.topics[name]; ok {
		return t, nil
	}
	if n.validation.delay > 0 { // before the topic is joined: no message of it goes unvalidated
		if err := n.ps.RegisterTopicValidator(name, n.validation.validator()); err != nil {
			return nil, err
		}
	}
	t, err := n.ps.Join(name)
	if err == nil {
		n.topics[name] = t
	}
	return t, err
}

// subscribe joins a topic; deliveries are logged by the tracer, so the subscription is only drained
// (a full one would make the library drop messages for it).
func (n *node) subscribe(ctx context.Context, name string) {
	t, err := n.topic(name)
	if err == nil {
		var sub *pubsub.Subscription
		if sub, err = t.Subscribe(); err == nil {
			n.log.emit("join", "topic", name)
			go func() {
				for {
					if _, err := sub.Next(ctx); err != nil {
						return
					}
				}
			}()
			return
		}
	}
	fmt.Fprintf(os.Stderr, "subscribe %s: %v\n", name, err)
}

// publish sends the schedule's seq-th message: its name `<node>-<seq>` (the same across restarts:
// the schedule is), a newline, random filler up to its size.
func (n *node) publish(ctx context.Context, seq int, topic string, size int) {
	name := fmt.Sprintf("%s-%d", n.cfg.NodeID, seq)
	data := make([]byte, max(size, len(name)+1))
	copy(data, name+"\n")
	rand.Read(data[len(name)+1:])
	n.log.emit("publish_message", "topic", topic, "msg_id", name, "size", len(data), "seq", seq)
	t, err := n.topic(topic)
	if err == nil {
		err = t.Publish(ctx, data)
	}
	if err != nil {
		n.log.emit("publish_refused", "topic", topic, "msg_id", name, "reason", err.Error())
	}
}

func (n *node) resourcesInterval() time.Duration {
	if n.cfg.ResourcesInterval == nil {
		return time.Second
	}
	return seconds(*n.cfg.ResourcesInterval)
}

// stop logs `stop` (the log's last line), closes the host (a few seconds at most) and exits 0.
func (n *node) stop(sig os.Signal) {
	reason := map[os.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
	n.log.close("stop", "reason", reason)
	n.mu.Lock()
	for _, t := range n.timers {
		t.Stop()
	}
	n.mu.Unlock()
	n.net.close(3 * time.Second)
	os.Exit(0)
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}
