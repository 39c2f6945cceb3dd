package main

// peerlab's GossipSub parameters (node/protocols/gossipsub_params.py), by their names, onto
// go-libp2p-pubsub's options: seconds become time.Duration, heartbeat counts stay counts. Only the
// parameters the scenario sets are passed (the library's defaults stand for the rest, and they are
// the ones peerlab's defaults copy); one this adapter does not map is refused, naming the ones it takes.

import (
	"fmt"
	"math"
	"strings"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// settings are what the parameters set: the router's params and the pubsub options beside them.
type settings struct {
	gs           pubsub.GossipSubParams
	floodPublish bool
	doPX         bool
	seenTTL      time.Duration
	maxRPCSize   int
	idontwant    bool // false: meshsub 1.1 at most, so no IDONTWANT either way
	validation   validation
}

// validation is peerlab's `validation` parameter as this adapter takes it: rule accept, and each
// message's validation taking `delay`, waited (sleep) or computed (cpu: validate.go).
type validation struct {
	delay time.Duration
	cpu   bool
}

// readValidation takes {rule: accept, delay: seconds, work: sleep|cpu} (origins empty, max_size null:
// the planner passes the whole model); the other rules are peerlab's own node's.
func readValidation(s *settings, v any) error {
	given, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("an object {delay, work}, not %v", v)
	}
	for name, value := range given {
		switch name {
		case "rule":
			if value != "accept" {
				return fmt.Errorf("rule accept (the adapter validates every message as valid), not %v", value)
			}
		case "origins":
			if list, ok := value.([]any); !ok || len(list) > 0 {
				return fmt.Errorf("no origins (rule accept), not %v", value)
			}
		case "max_size":
			if value != nil {
				return fmt.Errorf("no max_size (rule accept), not %v", value)
			}
		case "delay":
			f, ok := value.(float64)
			if !ok || f < 0 {
				return fmt.Errorf("delay in seconds >= 0, not %v", value)
			}
			s.validation.delay = seconds(f)
		case "work":
			if value != "sleep" && value != "cpu" {
				return fmt.Errorf("work sleep or cpu, not %v", value)
			}
			s.validation.cpu = value == "cpu"
		default:
			return fmt.Errorf("rule, delay and work, not %s", name)
		}
	}
	return nil
}

type setter func(s *settings, v any) error

// integer, count, duration, number, boolean: a setter of one kind from a JSON value.
func integer(set func(s *settings, v int)) setter {
	return func(s *settings, v any) error {
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || f < 0 {
			return fmt.Errorf("a whole number >= 0, not %v", v)
		}
		set(s, int(f))
		return nil
	}
}

func count(set func(s *settings, v uint64)) setter {
	return integer(func(s *settings, v int) { set(s, uint64(v)) })
}

func duration(set func(s *settings, v time.Duration)) setter {
	return func(s *settings, v any) error {
		f, ok := v.(float64)
		if !ok || f < 0 {
			return fmt.Errorf("seconds >= 0, not %v", v)
		}
		set(s, seconds(f))
		return nil
	}
}

func number(set func(s *settings, v float64)) setter {
	return func(s *settings, v any) error {
		f, ok := v.(float64)
		if !ok {
			return fmt.Errorf("a number, not %v", v)
		}
		set(s, f)
		return nil
	}
}

func boolean(set func(s *settings, v bool)) setter {
	return func(s *settings, v any) error {
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("true or false, not %v", v)
		}
		set(s, b)
		return nil
	}
}

// paramTable maps peerlab's names (adapter.json's `params`, in this order) onto the library's.
var paramTable = []struct {
	name string
	set  setter
}{
	{"D", integer(func(s *settings, v int) { s.gs.D = v })},
	{"D_lo", integer(func(s *settings, v int) { s.gs.Dlo = v })},
	{"D_hi", integer(func(s *settings, v int) { s.gs.Dhi = v })},
	{"D_lazy", integer(func(s *settings, v int) { s.gs.Dlazy = v })},
	{"D_out", integer(func(s *settings, v int) { s.gs.Dout = v })},
	{"D_score", integer(func(s *settings, v int) { s.gs.Dscore = v })},
	{"heartbeat_interval", duration(func(s *settings, v time.Duration) { s.gs.HeartbeatInterval = v })},
	{"heartbeat_initial_delay", duration(func(s *settings, v time.Duration) { s.gs.HeartbeatInitialDelay = v })},
	{"fanout_ttl", duration(func(s *settings, v time.Duration) { s.gs.FanoutTTL = v })},
	{"seen_ttl", duration(func(s *settings, v time.Duration) { s.seenTTL = v })},
	{"history_length", integer(func(s *settings, v int) { s.gs.HistoryLength = v })},
	{"history_gossip", integer(func(s *settings, v int) { s.gs.HistoryGossip = v })},
	{"gossip_factor", number(func(s *settings, v float64) { s.gs.GossipFactor = v })},
	{"gossip_retransmission", integer(func(s *settings, v int) { s.gs.GossipRetransmission = v })},
	{"flood_publish", boolean(func(s *settings, v bool) { s.floodPublish = v })},
	{"do_px", boolean(func(s *settings, v bool) { s.doPX = v })},
	{"prune_peers", integer(func(s *settings, v int) { s.gs.PrunePeers = v })},
	{"prune_backoff", duration(func(s *settings, v time.Duration) { s.gs.PruneBackoff = v })},
	{"unsubscribe_backoff", duration(func(s *settings, v time.Duration) { s.gs.UnsubscribeBackoff = v })},
	{"graft_flood_threshold", duration(func(s *settings, v time.Duration) { s.gs.GraftFloodThreshold = v })},
	{"opportunistic_graft_ticks", count(func(s *settings, v uint64) { s.gs.OpportunisticGraftTicks = v })},
	{"opportunistic_graft_peers", integer(func(s *settings, v int) { s.gs.OpportunisticGraftPeers = v })},
	{"max_ihave_length", integer(func(s *settings, v int) { s.gs.MaxIHaveLength = v })},
	{"max_ihave_messages", integer(func(s *settings, v int) { s.gs.MaxIHaveMessages = v })},
	{"iwant_followup_time", duration(func(s *settings, v time.Duration) { s.gs.IWantFollowupTime = v })},
	{"idontwant", boolean(func(s *settings, v bool) { s.idontwant = v })},
	{"idontwant_threshold", integer(func(s *settings, v int) { s.gs.IDontWantMessageThreshold = v })},
	{"idontwant_ttl", integer(func(s *settings, v int) { s.gs.IDontWantMessageTTL = v })},
	{"max_idontwant_length", integer(func(s *settings, v int) { s.gs.MaxIDontWantLength = v })},
	{"max_idontwant_messages", integer(func(s *settings, v int) { s.gs.MaxIDontWantMessages = v })},
	{"max_rpc_size", integer(func(s *settings, v int) { s.maxRPCSize = v })},
	{"validation", readValidation},
}

// fixedParams are what the library always does (adapter.json's `fixed`): accepted at that value only.
var fixedParams = map[string]any{
	"msg_id": "from-seqno", // the contract's message id, the library's default
	"sign":   true,         // StrictSign, the library's default
}

// offered are the GossipSub versions offered: 1.2 (IDONTWANT), 1.1 and 1.0, what js-libp2p,
// py-libp2p and peerlab speak (the library's default list also has 1.3, whose extensions no other
// implementation here has, and floodsub, which js-libp2p's adapter turns off).
var offered = []protocol.ID{pubsub.GossipSubID_v12, pubsub.GossipSubID_v11, pubsub.GossipSubID_v10}

func paramNames() string {
	names := make([]string, len(paramTable))
	for i, p := range paramTable {
		names[i] = p.name
	}
	return strings.Join(names, ", ")
}

// readParams applies the config's params to the library's defaults; a parameter it does not take,
// or a value of the wrong kind, exits 2 naming it.
func readParams(params map[string]any) settings {
	s := settings{gs: pubsub.DefaultGossipSubParams(), seenTTL: pubsub.TimeCacheDuration,
		maxRPCSize: pubsub.DefaultMaxMessageSize, idontwant: true}
next:
	for name, value := range params {
		for _, p := range paramTable {
			if p.name == name {
				if err := p.set(&s, value); err != nil {
					fail("parameter %s: expected %v", name, err)
				}
				continue next
			}
		}
		if fixed, ok := fixedParams[name]; ok {
			if value != fixed {
				fail("go-libp2p-pubsub cannot change %s: it always behaves as %s: %v", name, name, fixed)
			}
			continue
		}
		fail("no parameter %s (it takes: %s)", name, paramNames())
	}
	fitDefaults(&s.gs, params)
	return s
}

// fitDefaults lowers the library's defaults of D_score (4) and D_out (2), when the scenario leaves
// them out, to what the library accepts with the degrees it set, as peerlab's own node derives
// D_score: D_score at most D and D_hi, D_out below D_lo and below D/2 (D 4 with D_lo 3 runs with D_out 1
// where go-libp2p-pubsub would refuse its own default). A value the scenario sets is left as it is.
func fitDefaults(gs *pubsub.GossipSubParams, params map[string]any) {
	if _, set := params["D_score"]; !set {
		gs.Dscore = max(0, min(gs.Dscore, gs.D, gs.Dhi))
	}
	if _, set := params["D_out"]; !set {
		gs.Dout = max(0, min(gs.Dout, gs.Dlo-1, gs.D/2-1)) // go: Dout < D/2, in whole numbers
	}
}

// gossipOptions are the pubsub options of the config's params, and its validation; go-libp2p-pubsub
// checks the degrees itself (D_lo <= D <= D_hi, D_out < D_lo and D_out < D/2, D_score <= D_hi,
// history_gossip <= history_length) when the router is made, and main exits 2 with its message.
func gossipOptions(params map[string]any) ([]pubsub.Option, validation) {
	s := readParams(params)
	protocols := offered
	if !s.idontwant {
		protocols = offered[1:]
	}
	return []pubsub.Option{
		pubsub.WithGossipSubParams(s.gs),
		pubsub.WithGossipSubProtocols(protocols, pubsub.GossipSubDefaultFeatures),
		pubsub.WithFloodPublish(s.floodPublish),
		pubsub.WithPeerExchange(s.doPX),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithSeenMessagesTTL(s.seenTTL),
		pubsub.WithMaxMessageSize(s.maxRPCSize),
	}, s.validation
}
