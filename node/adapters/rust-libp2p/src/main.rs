//! peerlab node contract v1 (docs/node-contract.md) for rust-libp2p's GossipSub.
//!
//!     rust-libp2p-node --config FILE
//!     rust-libp2p-node --params params.json   (gossipsub-interop's contract: interop.rs)
//!
//! Reads the contract config, starts a libp2p swarm (TCP, Noise, Yamux, Identify, GossipSub) with the
//! identity derived from the config's seed, dials the planned peers, subscribes, publishes the
//! schedule from T0 and writes the contract's events as JSON lines. SIGTERM (or SIGINT) stops it.
//!
//! GossipSub runs with StrictSign (`MessageAuthenticity::Signed`, `ValidationMode::Strict`) and
//! go-libp2p-pubsub's message ids (from || seqno), not rust-libp2p's default (the base58 peer id
//! followed by the decimal sequence number), so that nodes of every implementation agree on the ids
//! in IHAVE, IWANT and IDONTWANT. Duplicates with their sender are seen by wrapping the behaviour
//! (observe.rs), RPCs with their counts by tapping the substreams (tap.rs).

mod events;
mod interop;
mod observe;
mod params;
mod tap;
mod validate;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::time::Duration;

use libp2p::core::muxing::StreamMuxerBox;
use libp2p::core::upgrade;
use libp2p::futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAuthenticity, MessageId, ValidationMode};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{identify, identity, noise, tcp, yamux, Multiaddr, PeerId, Swarm, Transport};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

const NAME: &str = "rust-libp2p adapter";
/// connections are kept however long they are idle (GossipSub may send nothing for a while)
const IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Deserialize)]
struct Endpoint {
    host: String,
    port: u16,
}

#[derive(Deserialize)]
struct Peer {
    host: String,
    port: u16,
    peer_id: String,
}

#[derive(Deserialize)]
struct Config {
    contract: u32,
    node_id: String,
    protocol: String,
    #[serde(default)]
    params: BTreeMap<String, Value>,
    identity_seed: String,
    peer_ids: HashMap<String, String>,
    listen: Endpoint,
    #[serde(default)]
    peers: HashMap<String, Peer>,
    #[serde(default)]
    dial: Vec<String>,
    #[serde(default)]
    subscriptions: Vec<String>,
    #[serde(default)]
    late_subscriptions: Vec<(f64, String)>,
    #[serde(default)]
    schedule: Vec<(f64, String, u64)>,
    t0_ns: i64,
    event_log: String,
    #[serde(default = "one")]
    resources_interval: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(NetworkBehaviour)]
struct Node {
    gossipsub: observe::Observed,
    identify: identify::Behaviour,
}

/// What the timers ask of the swarm's loop, and what validation reports to it.
enum Command {
    Dial(String),
    Publish(usize),
    Subscribe(String),
    Validated(PeerId, MessageId, gossipsub::Message),
}

fn refuse(message: String) -> ! {
    eprintln!("{NAME}: {message}");
    std::process::exit(2)
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Random filler for payloads.
fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    if n > 0 {
        let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
        if let Err(err) = filled {
            eprintln!("{NAME}: /dev/urandom: {err}");
        }
    }
    buf
}

/// How long until `ns` (unix nanoseconds) on the system clock; zero if it has passed.
fn until(ns: i64) -> Duration {
    Duration::from_nanos((ns - events::now_ns()).max(0) as u64)
}

fn at_offset(cfg: &Config, offset_s: f64) -> i64 {
    cfg.t0_ns + (offset_s * 1e9) as i64
}

/// The process's CPU time (user + system) and resident memory.
fn resources() -> (f64, u64) {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let cpu = if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0 {
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        seconds(usage.ru_utime) + seconds(usage.ru_stime)
    } else {
        0.0
    };
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    (cpu, rss * page)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--version") {
        println!(
            "rust-libp2p-node {}: libp2p {}, libp2p-gossipsub {}, {}",
            env!("CARGO_PKG_VERSION"),
            env!("PEERLAB_LIBP2P_VERSION"),
            env!("PEERLAB_GOSSIPSUB_VERSION"),
            env!("PEERLAB_RUSTC_VERSION")
        );
        return;
    }
    if let Some(path) = args.iter().position(|a| a == "--params").and_then(|i| args.get(i + 1)) {
        return interop::main(path);
    }
    let path = match args.iter().position(|a| a == "--config").and_then(|i| args.get(i + 1)) {
        Some(path) => path.clone(),
        None => refuse(
            "usage: rust-libp2p-node --config FILE        (peerlab's node contract 1)\n       \
             rust-libp2p-node --params params.json    (gossipsub-interop's contract, host name node<ID>)"
                .into(),
        ),
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| refuse(format!("reading {path}: {err}")));
    let cfg: Config = serde_json::from_str(&text).unwrap_or_else(|err| refuse(format!("{path}: {err}")));
    if cfg.contract != 1 {
        refuse(format!("adapter speaks contract 1, the config is contract {}", cfg.contract));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|err| refuse(format!("tokio: {err}")));
    runtime.block_on(run(cfg));
}

async fn run(cfg: Config) {
    // identity: the planner's peer id for this node, from the same seed
    let mut seed = hex(&cfg.identity_seed).unwrap_or_else(|| refuse("identity_seed is not hex".into()));
    let keypair =
        identity::Keypair::ed25519_from_bytes(&mut seed).unwrap_or_else(|err| refuse(format!("identity_seed: {err}")));
    let me = keypair.public().to_peer_id();
    let planned = cfg.peer_ids.get(&cfg.node_id).cloned().unwrap_or_default();
    if me.to_base58() != planned {
        refuse(format!("peer id {me} is not the planned {planned:?} (identity_seed)"));
    }
    let mut names = HashMap::new();
    for (node, pid) in &cfg.peer_ids {
        if let Ok(pid) = pid.parse::<PeerId>() {
            names.insert(pid, node.clone());
        }
    }

    // GossipSub's settings: the scenario's parameters on rust-libp2p's defaults
    let mut builder = gossipsub::ConfigBuilder::default();
    builder
        .validation_mode(ValidationMode::Strict)
        .message_id_fn(|m: &gossipsub::Message| MessageId(observe::message_id(m.source.as_ref(), m.sequence_number)));
    let mut gossip_params = cfg.params.clone();
    let validation = match gossip_params.remove("validation") {
        Some(v) => validate::read(&v).unwrap_or_else(|err| refuse(err)),
        None => validate::Validation::default(),
    };
    if !validation.delay.is_zero() {
        builder.validate_messages(); // delivered and relayed once reported (validate.rs)
    }
    if let Err(err) = params::apply(&mut builder, &gossip_params) {
        refuse(err);
    }
    let gs_config = builder.build().unwrap_or_else(|err| refuse(format!("GossipSub refused the parameters: {err}")));
    if let Err(err) = params::check(&gs_config) {
        refuse(format!("GossipSub refused the parameters: {err}"));
    }
    let behaviour = gossipsub::Behaviour::new(MessageAuthenticity::Signed(keypair.clone()), gs_config)
        .unwrap_or_else(|err| refuse(format!("GossipSub: {err}")));

    if let Err(err) = events::open(&cfg.event_log, &cfg.node_id, names) {
        refuse(format!("event log {}: {err}", cfg.event_log));
    }

    let mut swarm = libp2p::SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_other_transport(|key| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
            Ok(tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
                .upgrade(upgrade::Version::V1)
                .authenticate(noise::Config::new(key)?)
                .multiplex(yamux::Config::default())
                .map(|(peer, muxer), _| {
                    let tapped = tap::TapMuxer::new(StreamMuxerBox::new(muxer), events::name(&peer));
                    (peer, tapped)
                }))
        })
        .unwrap_or_else(|err| refuse(format!("transport: {err}")))
        .with_behaviour(|key| Node {
            gossipsub: observe::Observed::new(behaviour, observe::Contract::Peerlab),
            identify: identify::Behaviour::new(identify::Config::new("ipfs/0.1.0".into(), key.public())),
        })
        .unwrap_or_else(|err| refuse(format!("behaviour: {err}")))
        .with_swarm_config(|c| c.with_idle_connection_timeout(IDLE_TIMEOUT))
        .build();

    let listen: Multiaddr = format!("/ip4/{}/tcp/{}", cfg.listen.host, cfg.listen.port)
        .parse()
        .unwrap_or_else(|err| refuse(format!("listen address: {err}")));
    if let Err(err) = swarm.listen_on(listen) {
        eprintln!("{NAME}: listening on {}:{}: {err}", cfg.listen.host, cfg.listen.port);
        std::process::exit(1);
    }

    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    events::emit("start", json!({"protocol": cfg.protocol}));
    events::emit("behaviour", json!({"behaviour": "honest"}));
    for topic in &cfg.subscriptions {
        subscribe(&mut swarm, topic);
    }

    let (tx, mut commands) = mpsc::unbounded_channel::<Command>();
    events::emit("t0", json!({"t0": cfg.t0_ns}));
    // the schedule from T0; a restarted node skips what it missed (the schedule is the same)
    let now = events::now_ns();
    let mut publishes: Vec<(i64, usize)> = (cfg.schedule.iter().enumerate())
        .map(|(i, (offset, _, _))| (at_offset(&cfg, *offset), i))
        .filter(|(at, _)| *at >= now)
        .collect();
    publishes.sort();
    let sender = tx.clone();
    tokio::spawn(async move {
        for (at, index) in publishes {
            tokio::time::sleep(until(at)).await;
            if sender.send(Command::Publish(index)).is_err() {
                return;
            }
        }
    });
    let mut late: Vec<(i64, String)> =
        cfg.late_subscriptions.iter().map(|(offset, topic)| (at_offset(&cfg, *offset), topic.clone())).collect();
    late.sort();
    let sender = tx.clone();
    tokio::spawn(async move {
        for (at, topic) in late {
            tokio::time::sleep(until(at)).await;
            if sender.send(Command::Subscribe(topic)).is_err() {
                return;
            }
        }
    });
    if cfg.resources_interval > 0.0 {
        let every = Duration::from_secs_f64(cfg.resources_interval);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                let (cpu, rss) = resources();
                events::emit("resources", json!({"cpu_s": cpu, "rss_bytes": rss}));
            }
        });
    }

    // dialling: the planned peers this node dials, retried with backoff (a peer may start later or be
    // restarting), and dialled again when every connection to it has closed
    let mut dial_targets: HashMap<PeerId, String> = HashMap::new();
    for node in &cfg.dial {
        match cfg.peers.get(node).map(|p| p.peer_id.parse::<PeerId>()) {
            Some(Ok(pid)) => {
                dial_targets.insert(pid, node.clone());
            }
            _ => refuse(format!("dial: {node} has no peer in `peers` with a valid peer_id")),
        }
    }
    let mut attempts: HashMap<String, u32> = HashMap::new();
    let mut connected: HashSet<PeerId> = HashSet::new();
    for node in &cfg.dial {
        dial(&mut swarm, &cfg, node);
    }
    events::emit("ready", json!({}));

    let retry = |tx: &mpsc::UnboundedSender<Command>, node: String, attempt: u32| {
        // 100 ms doubling to 2 s, jittered (two nodes redialling each other must not stay in step)
        let base = 0.1 * 2f64.powi(attempt.min(5) as i32);
        let jitter = 0.75 + 0.5 * (random_bytes(1)[0] as f64 / 255.0);
        let wait = Duration::from_secs_f64(base.min(2.0) * jitter);
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.send(Command::Dial(node));
        });
    };

    loop {
        tokio::select! {
            _ = term.recv() => stop("SIGTERM"),
            _ = int.recv() => stop("SIGINT"),
            Some(command) = commands.recv() => match command {
                Command::Dial(node) => dial(&mut swarm, &cfg, &node),
                Command::Subscribe(topic) => subscribe(&mut swarm, &topic),
                Command::Publish(index) => publish(&mut swarm, &cfg, index),
                Command::Validated(peer, id, message) => {
                    let gossipsub = &mut swarm.behaviour_mut().gossipsub;
                    gossipsub.inner.report_message_validation_result(&id, &peer, gossipsub::MessageAcceptance::Accept);
                    if gossipsub.first_copy(&id.0) {
                        delivered(&peer, &message);
                    }
                }
            },
            event = swarm.select_next_some() => match event {
                SwarmEvent::Behaviour(NodeEvent::Gossipsub(gossipsub::Event::Message { propagation_source, message_id, message })) => {
                    if !validation.delay.is_zero() {
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            validate::validate(validation, message.data.clone()).await;
                            let _ = tx.send(Command::Validated(propagation_source, message_id, message));
                        });
                    } else if swarm.behaviour_mut().gossipsub.first_copy(&message_id.0) {
                        delivered(&propagation_source, &message);
                    } else {
                        events::emit("duplicate_message", json!({
                            "topic": message.topic.as_str(), "msg_id": observe::label(&message.data),
                            "peer": events::name(&propagation_source), "size": message.data.len(),
                        }));
                    }
                }
                SwarmEvent::ConnectionEstablished { peer_id, endpoint, num_established, .. } => {
                    if let Some(node) = dial_targets.get(&peer_id) {
                        attempts.remove(node);
                    }
                    if num_established.get() == 1 && connected.insert(peer_id) {
                        events::emit("connect", json!({"peer": events::name(&peer_id), "outbound": endpoint.is_dialer()}));
                    }
                }
                // the last connection to the peer closed
                SwarmEvent::ConnectionClosed { peer_id, num_established: 0, cause, .. } if connected.remove(&peer_id) => {
                    let reason = cause.map(|c| c.to_string()).unwrap_or_else(|| "closed".into());
                    events::emit("disconnect", json!({"peer": events::name(&peer_id), "reason": reason}));
                    if let Some(node) = dial_targets.get(&peer_id) {
                        retry(&tx, node.clone(), 0);
                    }
                }
                SwarmEvent::OutgoingConnectionError { peer_id: Some(peer_id), .. } => {
                    if let Some(node) = dial_targets.get(&peer_id) {
                        if !connected.contains(&peer_id) {
                            let attempt = attempts.entry(node.clone()).or_insert(0);
                            *attempt += 1;
                            retry(&tx, node.clone(), *attempt);
                        }
                    }
                }
                _ => {}
            },
        }
    }
}

/// A first copy, validated: `deliver_message`.
fn delivered(peer: &PeerId, message: &gossipsub::Message) {
    events::emit(
        "deliver_message",
        json!({
            "topic": message.topic.as_str(), "msg_id": observe::label(&message.data),
            "origin": message.source.as_ref().map(events::name).unwrap_or_default(),
            "peer": events::name(peer), "size": message.data.len(),
        }),
    );
}

fn stop(reason: &str) -> ! {
    events::emit("stop", json!({"reason": reason}));
    std::process::exit(0)
}

fn subscribe(swarm: &mut Swarm<Node>, topic: &str) {
    match swarm.behaviour_mut().gossipsub.inner.subscribe(&IdentTopic::new(topic)) {
        Ok(_) => events::emit("join", json!({"topic": topic})),
        Err(err) => eprintln!("{NAME}: subscribing to {topic}: {err}"),
    }
}

fn dial(swarm: &mut Swarm<Node>, cfg: &Config, node: &str) {
    let Some(peer) = cfg.peers.get(node) else { return };
    let (Ok(pid), Ok(addr)) =
        (peer.peer_id.parse::<PeerId>(), format!("/ip4/{}/tcp/{}", peer.host, peer.port).parse::<Multiaddr>())
    else {
        eprintln!("{NAME}: dial {node}: bad peer id or address");
        return;
    };
    let opts = DialOpts::peer_id(pid).addresses(vec![addr]).condition(PeerCondition::DisconnectedAndNotDialing).build();
    // refused at once when connected or being dialled already: nothing to retry then
    let _ = swarm.dial(opts);
}

fn publish(swarm: &mut Swarm<Node>, cfg: &Config, index: usize) {
    let (_, topic, size) = &cfg.schedule[index];
    let seq = index + 1; // names stay unique across restarts: the schedule is the same
    let msg_id = format!("{}-{seq}", cfg.node_id);
    let mut data = format!("{msg_id}\n").into_bytes();
    let filler = (*size as usize).saturating_sub(data.len());
    data.extend(random_bytes(filler));
    events::emit("publish_message", json!({"topic": topic, "msg_id": msg_id, "size": data.len(), "seq": seq}));
    let gossipsub = &mut swarm.behaviour_mut().gossipsub;
    match gossipsub.inner.publish(IdentTopic::new(topic.as_str()), data) {
        Ok(id) => gossipsub.published(&id.0),
        Err(err) => {
            events::emit("publish_refused", json!({"topic": topic, "msg_id": msg_id, "reason": err.to_string()}))
        }
    }
}
