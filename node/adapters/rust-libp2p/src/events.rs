//! The contract's event log: one JSON object per line, appended (O_APPEND) with one write per line, so
//! a killed node loses nothing it logged; `ts` in unix nanoseconds on the system clock. The log is
//! process-wide: the swarm's task and the connections' taps (tap.rs) write to it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use libp2p::PeerId;
use serde_json::{Map, Value};

struct Log {
    file: Mutex<File>,
    node: String,
    /// peer id -> node id, to name peers and origins by node id
    names: HashMap<PeerId, String>,
}

static LOG: OnceLock<Log> = OnceLock::new();

pub fn open(path: &str, node: &str, names: HashMap<PeerId, String>) -> std::io::Result<()> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let _ = LOG.set(Log { file: Mutex::new(file), node: node.to_string(), names });
    Ok(())
}

/// Unix time in nanoseconds (CLOCK_REALTIME, as the runner and the other nodes read it).
pub fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// The node id of a peer id (its base58 text when it is not in the config's peer_ids).
pub fn name(peer: &PeerId) -> String {
    LOG.get().and_then(|log| log.names.get(peer).cloned()).unwrap_or_else(|| peer.to_base58())
}

/// Writes one event: `fields` is a JSON object of the type's fields.
pub fn emit(kind: &str, fields: Value) {
    let Some(log) = LOG.get() else { return };
    let mut event = Map::new();
    event.insert("ts".into(), Value::from(now_ns()));
    event.insert("node".into(), Value::from(log.node.as_str()));
    event.insert("type".into(), Value::from(kind));
    if let Value::Object(rest) = fields {
        event.extend(rest);
    }
    let mut line = Value::Object(event).to_string();
    line.push('\n');
    let mut file = log.file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Err(err) = file.write_all(line.as_bytes()) {
        eprintln!("rust-libp2p adapter: writing the event log: {err}");
    }
}
