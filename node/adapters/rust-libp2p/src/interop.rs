//! The adapter's second mode: gossipsub-interop's contract (libp2p/test-plans, gossipsub-interop;
//! docs/interop.md), so the same binary runs in their Shadow experiments and in peerlab through
//! node/interop's shim.
//!
//!     rust-libp2p-node --params params.json
//!
//! The swarm and library are the contract-1 mode's; what that contract fixes is done as it says: the
//! node id from the host name `node<ID>`, the Ed25519 key seeded by the id (little endian), TCP port
//! 9000, peers reached by their host names, messages unsigned (`MessageAuthenticity::Anonymous`) with
//! their first 8 bytes as id (big endian, logged in base 10), GossipSub's parameters by
//! go-libp2p-pubsub's names (times in nanoseconds; those rust-libp2p has no setting for keep its
//! default, said on stderr), and stdout as JSON lines: `PeerID` at start, `Received Message` for every
//! copy received (a first copy once validated, as go-libp2p-pubsub's tracer logs it). The script's
//! instructions run in order; `waitUntil` counts whole seconds from the process's start; a `connect`
//! dials and goes on (the swarm retries a refused dial for 10 s).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::ToSocketAddrs;
use std::time::{Duration, Instant, SystemTime};

use libp2p::futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance, MessageAuthenticity, MessageId, ValidationMode};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::SwarmEvent;
use libp2p::{identify, identity, noise, tcp, yamux, Multiaddr, PeerId, Swarm};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::{observe, params, random_bytes, refuse, Node, NodeEvent, IDLE_TIMEOUT};

const PORT: u16 = 9000;
/// how long a refused dial is retried (a peer may start a moment later)
const CONNECT_FOR: Duration = Duration::from_secs(10);
const REDIAL_AFTER: Duration = Duration::from_millis(200);

/// go-libp2p-pubsub's GossipSubParams field -> (peerlab's name, params.rs; whether it is nanoseconds)
const GO_NAMES: &[(&str, &str, bool)] = &[
    ("D", "D", false),
    ("Dlo", "D_lo", false),
    ("Dhi", "D_hi", false),
    ("Dlazy", "D_lazy", false),
    ("Dout", "D_out", false),
    ("Dscore", "D_score", false),
    ("HeartbeatInterval", "heartbeat_interval", true),
    ("HeartbeatInitialDelay", "heartbeat_initial_delay", true),
    ("FanoutTTL", "fanout_ttl", true),
    ("HistoryLength", "history_length", false),
    ("HistoryGossip", "history_gossip", false),
    ("GossipFactor", "gossip_factor", false),
    ("GossipRetransmission", "gossip_retransmission", false),
    ("PrunePeers", "prune_peers", false),
    ("PruneBackoff", "prune_backoff", true),
    ("UnsubscribeBackoff", "unsubscribe_backoff", true),
    ("GraftFloodThreshold", "graft_flood_threshold", true),
    ("OpportunisticGraftTicks", "opportunistic_graft_ticks", false),
    ("OpportunisticGraftPeers", "opportunistic_graft_peers", false),
    ("MaxIHaveLength", "max_ihave_length", false),
    ("MaxIHaveMessages", "max_ihave_messages", false),
    ("IWantFollowupTime", "iwant_followup_time", true),
    ("IDontWantMessageThreshold", "idontwant_threshold", false),
];
/// go's fields with no rust-libp2p setting: accepted, the library's behaviour stands
const GO_ONLY: &[&str] = &[
    "SlowHeartbeatWarning",
    "Connectors",
    "MaxPendingConnections",
    "ConnectionTimeout",
    "DirectConnectTicks",
    "DirectConnectInitialDelay",
    "IDontWantMessageTTL",
    "MaxIDontWantLength",
    "MaxIDontWantMessages",
];

/// One instruction of the script (their script_instruction.py); partial messages are refused.
#[derive(Deserialize, Clone)]
#[serde(tag = "type")]
enum Instruction {
    #[serde(rename = "connect")]
    Connect {
        #[serde(rename = "connectTo")]
        connect_to: Vec<u64>,
    },
    #[serde(rename = "ifNodeIDEquals")]
    IfNodeIdEquals {
        #[serde(rename = "nodeID")]
        node_id: u64,
        instruction: Box<Instruction>,
    },
    #[serde(rename = "waitUntil")]
    WaitUntil {
        #[serde(rename = "elapsedSeconds")]
        elapsed_seconds: u64,
    },
    #[serde(rename = "publish")]
    Publish {
        #[serde(rename = "messageID")]
        message_id: u64,
        #[serde(rename = "messageSizeBytes")]
        size: usize,
        #[serde(rename = "topicID")]
        topic: String,
    },
    #[serde(rename = "subscribeToTopic")]
    Subscribe {
        #[serde(rename = "topicID")]
        topic: String,
    },
    #[serde(rename = "setTopicValidationDelay")]
    ValidationDelay {
        #[serde(rename = "topicID")]
        topic: String,
        #[serde(rename = "delaySeconds")]
        seconds: f64,
    },
    #[serde(rename = "initGossipSub")]
    Init {
        #[serde(rename = "gossipSubParams")]
        params: BTreeMap<String, Value>,
    },
}

#[derive(Deserialize)]
struct Params {
    script: Vec<Instruction>,
}

/// What the script asks of the swarm's loop, and what the validation timers report.
enum Command {
    Connect(Vec<u64>),
    Subscribe(String),
    Publish(u64, usize, String),
    Redial(PeerId, Multiaddr),
    Validated(MessageId, PeerId, Vec<u8>, String),
}

/// A message's id in this contract: its first 8 bytes.
pub fn message_id(data: &[u8]) -> Vec<u8> {
    data[..data.len().min(8)].to_vec()
}

/// One JSON line on stdout, as go's slog writes them (`time` in RFC 3339 with nanoseconds, `msg`).
fn say(msg: &str, fields: Value) {
    let mut line =
        json!({"time": humantime::format_rfc3339_nanos(SystemTime::now()).to_string(), "level": "INFO", "msg": msg});
    if let (Value::Object(line), Value::Object(rest)) = (&mut line, fields) {
        line.extend(rest);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
}

/// A copy received: `Received Message` with the id in base 10 and the peer it came from.
pub fn received(data: &[u8], from: &PeerId, topic: &str) {
    let id = message_id(data);
    let id = match <[u8; 8]>::try_from(id.as_slice()) {
        Ok(bytes) => u64::from_be_bytes(bytes).to_string(),
        Err(_) => String::from_utf8_lossy(&id).into_owned(),
    };
    say("Received Message", json!({"id": id, "from": from.to_base58(), "topic": topic}));
}

fn key(id: u64) -> identity::Keypair {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&id.to_le_bytes());
    identity::Keypair::ed25519_from_bytes(seed).unwrap_or_else(|err| refuse(format!("identity: {err}")))
}

fn host_id() -> u64 {
    let mut buf = [0u8; 256];
    let name = if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    name.strip_prefix("node").and_then(|id| id.parse().ok()).unwrap_or_else(|| {
        refuse(format!("the host name {name:?} is not node<ID> (the gossipsub-interop contract names every node so)"))
    })
}

/// The instruction meant for this node: ifNodeIDEquals unwrapped, or None.
fn own(mut instruction: &Instruction, me: u64) -> Option<&Instruction> {
    while let Instruction::IfNodeIdEquals { node_id, instruction: inner } = instruction {
        if *node_id != me {
            return None;
        }
        instruction = inner;
    }
    Some(instruction)
}

/// initGossipSub's parameters (go's names) as peerlab's, for params.rs.
fn peerlab_params(given: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (name, value) in given.iter().filter(|(_, v)| !v.is_null()) {
        if let Some((_, ours, nanoseconds)) = GO_NAMES.iter().find(|(go, _, _)| go == name) {
            let value = match (nanoseconds, value.as_f64()) {
                (true, Some(ns)) => json!(ns / 1e9),
                _ => value.clone(),
            };
            out.insert(ours.to_string(), value);
        } else if GO_ONLY.contains(&name.as_str()) {
            eprintln!(
                "rust-libp2p adapter: initGossipSub {name}: rust-libp2p has no such setting; its behaviour stands"
            );
        } else {
            refuse(format!("initGossipSub: go-libp2p-pubsub's GossipSubParams has no field {name}"));
        }
    }
    out
}

pub fn main(path: &str) {
    let start = Instant::now();
    let text = std::fs::read_to_string(path).unwrap_or_else(|err| refuse(format!("reading {path}: {err}")));
    let params: Params = serde_json::from_str(&text).unwrap_or_else(|err| {
        refuse(format!(
            "{path}: {err} (this adapter runs connect, ifNodeIDEquals, waitUntil, subscribeToTopic, \
             setTopicValidationDelay, initGossipSub and publish)"
        ))
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|err| refuse(format!("tokio: {err}")));
    runtime.block_on(run(params.script, start));
}

async fn run(script: Vec<Instruction>, start: Instant) {
    let me = host_id();
    let keypair = key(me);
    let mine: Vec<Instruction> = script.iter().filter_map(|i| own(i, me)).cloned().collect();
    let mut delays: HashMap<String, Duration> = HashMap::new();
    let mut builder = gossipsub::ConfigBuilder::default();
    builder
        .validation_mode(ValidationMode::Anonymous)
        .message_id_fn(|m: &gossipsub::Message| MessageId(message_id(&m.data)));
    for instruction in &mine {
        match instruction {
            Instruction::Init { params: given } => {
                if let Err(err) = params::apply(&mut builder, &peerlab_params(given)) {
                    refuse(format!("initGossipSub: {err}"));
                }
            }
            Instruction::ValidationDelay { topic, seconds } if seconds.is_finite() && *seconds >= 0.0 => {
                delays.insert(topic.clone(), Duration::from_secs_f64(*seconds));
            }
            Instruction::ValidationDelay { seconds, .. } => refuse(format!("setTopicValidationDelay: {seconds} s")),
            _ => {}
        }
    }
    if !delays.is_empty() {
        builder.validate_messages(); // Event::Message waits for report_message_validation_result
    }
    let config = builder.build().unwrap_or_else(|err| refuse(format!("GossipSub refused the parameters: {err}")));
    if let Err(err) = params::check(&config) {
        refuse(format!("GossipSub refused the parameters: {err}"));
    }
    let behaviour = gossipsub::Behaviour::new(MessageAuthenticity::Anonymous, config)
        .unwrap_or_else(|err| refuse(format!("GossipSub: {err}")));
    let mut swarm = libp2p::SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
        .unwrap_or_else(|err| refuse(format!("transport: {err}")))
        .with_behaviour(|key| Node {
            gossipsub: observe::Observed::new(behaviour, observe::Contract::Interop),
            identify: identify::Behaviour::new(identify::Config::new("ipfs/0.1.0".into(), key.public())),
        })
        .unwrap_or_else(|err| refuse(format!("behaviour: {err}")))
        .with_swarm_config(|c| c.with_idle_connection_timeout(IDLE_TIMEOUT))
        .build();
    let listen: Multiaddr = format!("/ip4/0.0.0.0/tcp/{PORT}").parse().expect("a multiaddr");
    if let Err(err) = swarm.listen_on(listen) {
        eprintln!("rust-libp2p adapter: listening on port {PORT}: {err}");
        std::process::exit(1);
    }
    say("PeerID", json!({"id": swarm.local_peer_id().to_base58(), "node_id": me}));

    let (tx, mut commands) = mpsc::unbounded_channel::<Command>();
    let script_tx = tx.clone();
    tokio::spawn(async move {
        for instruction in mine {
            let command = match instruction {
                Instruction::WaitUntil { elapsed_seconds } => {
                    tokio::time::sleep_until((start + Duration::from_secs(elapsed_seconds)).into()).await;
                    continue;
                }
                Instruction::Connect { connect_to } => Command::Connect(connect_to),
                Instruction::Subscribe { topic } => Command::Subscribe(topic),
                Instruction::Publish { message_id, size, topic } => Command::Publish(message_id, size, topic),
                _ => continue, // read before the swarm started
            };
            if script_tx.send(command).is_err() {
                return;
            }
        }
    });

    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut dialling: HashMap<PeerId, (Multiaddr, Instant)> = HashMap::new();
    loop {
        tokio::select! {
            _ = term.recv() => std::process::exit(0),
            _ = int.recv() => std::process::exit(0),
            Some(command) = commands.recv() => match command {
                Command::Connect(targets) => {
                    for target in targets {
                        if let Some((peer, addr)) = address(target) {
                            dial(&mut swarm, peer, addr.clone());
                            dialling.insert(peer, (addr, Instant::now() + CONNECT_FOR));
                        }
                    }
                }
                Command::Redial(peer, addr) => dial(&mut swarm, peer, addr),
                Command::Subscribe(topic) => {
                    if let Err(err) = swarm.behaviour_mut().gossipsub.inner.subscribe(&IdentTopic::new(&topic)) {
                        eprintln!("rust-libp2p adapter: subscribing to {topic}: {err}");
                    }
                }
                Command::Publish(id, size, topic) => {
                    let mut data = id.to_be_bytes().to_vec();
                    data.extend(random_bytes(size.saturating_sub(8)));
                    let gossipsub = &mut swarm.behaviour_mut().gossipsub;
                    match gossipsub.inner.publish(IdentTopic::new(&topic), data) {
                        Ok(id) => gossipsub.published(&id.0),
                        Err(err) => eprintln!("rust-libp2p adapter: publish {id}: {err}"),
                    }
                }
                Command::Validated(id, source, data, topic) => {
                    swarm.behaviour_mut().gossipsub.inner.report_message_validation_result(&id, &source, MessageAcceptance::Accept);
                    received(&data, &source, &topic);
                }
            },
            event = swarm.select_next_some() => match event {
                SwarmEvent::Behaviour(NodeEvent::Gossipsub(gossipsub::Event::Message { propagation_source, message_id, message })) => {
                    if !swarm.behaviour_mut().gossipsub.first_copy(&message_id.0) {
                        continue;
                    }
                    let topic = message.topic.as_str().to_string();
                    match delays.get(&topic) {
                        Some(delay) => {
                            let (tx, delay) = (tx.clone(), *delay);
                            tokio::spawn(async move {
                                tokio::time::sleep(delay).await;
                                let _ = tx.send(Command::Validated(message_id, propagation_source, message.data, topic));
                            });
                        }
                        None if !delays.is_empty() => {
                            swarm.behaviour_mut().gossipsub.inner.report_message_validation_result(&message_id, &propagation_source, MessageAcceptance::Accept);
                            received(&message.data, &propagation_source, &topic);
                        }
                        None => received(&message.data, &propagation_source, &topic),
                    }
                }
                SwarmEvent::ConnectionEstablished { peer_id, .. } => {
                    dialling.remove(&peer_id);
                }
                SwarmEvent::OutgoingConnectionError { peer_id: Some(peer_id), .. } => {
                    if let Some((addr, until)) = dialling.get(&peer_id).cloned() {
                        if Instant::now() < until {
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(REDIAL_AFTER).await;
                                let _ = tx.send(Command::Redial(peer_id, addr));
                            });
                        } else {
                            dialling.remove(&peer_id);
                            eprintln!("rust-libp2p adapter: connect to {peer_id}: refused for {CONNECT_FOR:?}");
                        }
                    }
                }
                _ => {}
            },
        }
    }
}

/// node<N>'s peer id and address (its host name resolved).
fn address(target: u64) -> Option<(PeerId, Multiaddr)> {
    let peer = key(target).public().to_peer_id();
    match (format!("node{target}"), PORT).to_socket_addrs().map(|mut a| a.find(|a| a.is_ipv4())) {
        Ok(Some(addr)) => Some((peer, format!("/ip4/{}/tcp/{PORT}", addr.ip()).parse().ok()?)),
        _ => {
            eprintln!("rust-libp2p adapter: connect: node{target} does not resolve");
            None
        }
    }
}

fn dial(swarm: &mut Swarm<Node>, peer: PeerId, addr: Multiaddr) {
    let opts =
        DialOpts::peer_id(peer).addresses(vec![addr]).condition(PeerCondition::DisconnectedAndNotDialing).build();
    let _ = swarm.dial(opts);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_names_become_peerlabs_with_times_in_seconds() {
        let given: BTreeMap<String, Value> = serde_json::from_str(
            r#"{"D": 6, "Dlo": 5, "HeartbeatInterval": 700000000, "FanoutTTL": null, "MaxIDontWantLength": 10}"#,
        )
        .unwrap();
        let ours = peerlab_params(&given);
        assert_eq!(ours.get("D"), Some(&json!(6)));
        assert_eq!(ours.get("D_lo"), Some(&json!(5)));
        assert_eq!(ours.get("heartbeat_interval"), Some(&json!(0.7)));
        assert_eq!(ours.len(), 3); // null: the default; MaxIDontWantLength: no rust-libp2p setting
    }

    #[test]
    fn every_go_name_maps_to_a_parameter_params_rs_takes() {
        for (go, ours, _) in GO_NAMES {
            assert!(params::TAKEN.iter().any(|(name, _)| name == ours), "{go} -> {ours}");
        }
    }

    #[test]
    fn a_script_parses_with_nested_instructions_and_its_own_part_is_kept() {
        let script: Params = serde_json::from_str(
            r#"{"script": [{"type": "ifNodeIDEquals", "nodeID": 1, "instruction": {"type": "publish",
                "messageID": 7, "messageSizeBytes": 100, "topicID": "t"}},
              {"type": "waitUntil", "elapsedSeconds": 3}]}"#,
        )
        .unwrap();
        assert!(own(&script.script[0], 0).is_none());
        assert!(matches!(own(&script.script[0], 1), Some(Instruction::Publish { message_id: 7, size: 100, .. })));
        assert!(matches!(own(&script.script[1], 0), Some(Instruction::WaitUntil { elapsed_seconds: 3 })));
        assert_eq!(message_id(&[0, 0, 0, 0, 0, 0, 0, 7, 42]), vec![0, 0, 0, 0, 0, 0, 0, 7]);
    }
}
