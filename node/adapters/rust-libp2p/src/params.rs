//! peerlab's GossipSub parameter names -> rust-libp2p's `gossipsub::ConfigBuilder` (seconds become
//! Durations). A parameter not here is refused; the builder's own validation error is surfaced.

use std::collections::BTreeMap;
use std::time::Duration;

use libp2p::gossipsub::{Config, ConfigBuilder};
use serde_json::Value;

/// (peerlab's name, the builder's method it sets)
pub const TAKEN: &[(&str, &str)] = &[
    ("D", "mesh_n"),
    ("D_lo", "mesh_n_low"),
    ("D_hi", "mesh_n_high"),
    ("D_lazy", "gossip_lazy"),
    ("D_out", "mesh_outbound_min"),
    ("D_score", "retain_scores"),
    ("heartbeat_interval", "heartbeat_interval"),
    ("heartbeat_initial_delay", "heartbeat_initial_delay"),
    ("fanout_ttl", "fanout_ttl"),
    ("seen_ttl", "duplicate_cache_time"),
    ("history_length", "history_length"),
    ("history_gossip", "history_gossip"),
    ("gossip_factor", "gossip_factor"),
    ("gossip_retransmission", "gossip_retransimission"),
    ("flood_publish", "flood_publish"),
    ("do_px", "do_px"),
    ("prune_peers", "prune_peers"),
    ("prune_backoff", "prune_backoff"),
    ("unsubscribe_backoff", "unsubscribe_backoff"),
    ("graft_flood_threshold", "graft_flood_threshold"),
    ("opportunistic_graft_ticks", "opportunistic_graft_ticks"),
    ("opportunistic_graft_peers", "opportunistic_graft_peers"),
    ("iwant_followup_time", "iwant_followup_time"),
    ("idontwant_threshold", "idontwant_message_size_threshold"),
    ("max_ihave_length", "max_control_messages_sent"),
    ("max_ihave_messages", "max_ihave_messages_heartbeat"),
    ("max_rpc_size", "max_transmit_size"),
];

/// The adapter's settings where rust-libp2p's defaults differ from go-libp2p's in a way that matters
/// in a testbed; a scenario's parameter wins over them.
pub const HEARTBEAT_INITIAL_DELAY: f64 = 0.1; // rust-libp2p: 5 s (go, js: 100 ms)
pub const MAX_RPC_SIZE: usize = 1 << 20; // rust-libp2p: 64 KiB (go: 1 MiB, peerlab's max_rpc_size)

fn names() -> String {
    TAKEN.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}

fn seconds(name: &str, value: &Value) -> Result<Duration, String> {
    value
        .as_f64()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{name} must be a number of seconds >= 0, not {value}"))
}

fn count(name: &str, value: &Value) -> Result<u64, String> {
    value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0).map(|f| f as u64))
        .ok_or_else(|| format!("{name} must be a whole number >= 0, not {value}"))
}

fn flag(name: &str, value: &Value) -> Result<bool, String> {
    value.as_bool().ok_or_else(|| format!("{name} must be true or false, not {value}"))
}

/// Applies the scenario's parameters to `builder`; Err names the parameter and what is wrong.
pub fn apply(builder: &mut ConfigBuilder, params: &BTreeMap<String, Value>) -> Result<(), String> {
    let unknown: Vec<&str> =
        params.keys().map(String::as_str).filter(|p| !TAKEN.iter().any(|(name, _)| name == p)).collect();
    if !unknown.is_empty() {
        return Err(format!("no parameter {} (it takes: {})", unknown.join(", "), names()));
    }
    builder.heartbeat_initial_delay(Duration::from_secs_f64(HEARTBEAT_INITIAL_DELAY));
    let rpc_size = match params.get("max_rpc_size") {
        Some(v) => count("max_rpc_size", v)? as usize,
        None => MAX_RPC_SIZE,
    };
    // rust-libp2p also caps an RPC's subscriptions and control entries at 16 KiB (refusing the whole
    // RPC beyond it: an IHAVE of about 350 ids); go-libp2p has no such cap, so it follows the RPC's
    // limit here
    builder.max_transmit_size(rpc_size).max_control_message_size(rpc_size);
    for (name, v) in params {
        let n = name.as_str();
        match n {
            "D" => {
                builder.mesh_n(count(n, v)? as usize);
            }
            "D_lo" => {
                builder.mesh_n_low(count(n, v)? as usize);
            }
            "D_hi" => {
                builder.mesh_n_high(count(n, v)? as usize);
            }
            "D_lazy" => {
                builder.gossip_lazy(count(n, v)? as usize);
            }
            "D_out" => {
                builder.mesh_outbound_min(count(n, v)? as usize);
            }
            "D_score" => {
                builder.retain_scores(count(n, v)? as usize);
            }
            "heartbeat_interval" => {
                builder.heartbeat_interval(seconds(n, v)?);
            }
            "heartbeat_initial_delay" => {
                builder.heartbeat_initial_delay(seconds(n, v)?);
            }
            "fanout_ttl" => {
                builder.fanout_ttl(seconds(n, v)?);
            }
            "seen_ttl" => {
                builder.duplicate_cache_time(seconds(n, v)?);
            }
            "history_length" => {
                builder.history_length(count(n, v)? as usize);
            }
            "history_gossip" => {
                builder.history_gossip(count(n, v)? as usize);
            }
            "gossip_factor" => {
                let f = v.as_f64().ok_or_else(|| format!("gossip_factor must be a number, not {v}"))?;
                builder.gossip_factor(f);
            }
            "gossip_retransmission" => {
                let r = u32::try_from(count(n, v)?).map_err(|_| format!("{n} is too large"))?;
                builder.gossip_retransimission(r);
            }
            "flood_publish" => {
                builder.flood_publish(flag(n, v)?);
            }
            "do_px" => {
                if flag(n, v)? {
                    builder.do_px();
                }
            }
            "prune_peers" => {
                builder.prune_peers(count(n, v)? as usize);
            }
            "prune_backoff" => {
                builder.prune_backoff(seconds(n, v)?);
            }
            "unsubscribe_backoff" => {
                builder.unsubscribe_backoff(seconds(n, v)?);
            }
            "graft_flood_threshold" => {
                builder.graft_flood_threshold(seconds(n, v)?);
            }
            "opportunistic_graft_ticks" => {
                builder.opportunistic_graft_ticks(count(n, v)?);
            }
            "opportunistic_graft_peers" => {
                builder.opportunistic_graft_peers(count(n, v)? as usize);
            }
            "iwant_followup_time" => {
                builder.iwant_followup_time(seconds(n, v)?);
            }
            "idontwant_threshold" => {
                builder.idontwant_message_size_threshold(count(n, v)? as usize);
            }
            "max_ihave_length" => {
                builder.max_control_messages_sent(count(n, v)? as usize);
            }
            "max_ihave_messages" => {
                builder.max_ihave_messages_heartbeat(count(n, v)? as usize);
            }
            "max_rpc_size" => {} // above
            _ => unreachable!("checked above"),
        }
    }
    Ok(())
}

/// The mesh degrees' bounds, which `ConfigBuilder::build` checks only for topics given their own mesh
/// settings (libp2p-gossipsub 0.50.1), not for the defaults every topic here uses.
pub fn check(config: &Config) -> Result<(), String> {
    let (d, lo, hi, out) = (config.mesh_n(), config.mesh_n_low(), config.mesh_n_high(), config.mesh_outbound_min());
    if !(out <= lo && lo <= d && d <= hi) {
        return Err(format!("D_out {out} <= D_lo {lo} <= D {d} <= D_hi {hi} does not hold"));
    }
    if out * 2 > d {
        return Err(format!("D_out {out} is more than half of D {d}"));
    }
    Ok(())
}
