//! Every GossipSub RPC sent and received, read off the connection's substreams.
//!
//! rust-libp2p's GossipSub has no tracer, and the RPCs it sends never pass through a public type: the
//! behaviour queues them for the connection handler, which encodes and writes them itself. So the
//! adapter wraps the stream muxer (Yamux, after Noise): each substream's plaintext passes through a
//! `TapStream`, which follows multistream-select's negotiation (length-prefixed lines) and, on a
//! substream that settled on `/meshsub/...` (or `/floodsub/...`), decodes every length-prefixed
//! frame as an RPC (rpc.proto) to log `send_rpc` / `recv_rpc` with the contract's counts: message ids
//! in IHAVE, IWANT and IDONTWANT, topics in GRAFT and PRUNE, and the bytes of each kind, as peerlab's
//! own node counts them. A frame is logged when its last byte has been handed to Yamux (sent) or read
//! from it (received); `bytes` is the encoded RPC without its length prefix (Yamux, Noise and TCP
//! framing are not included; the kernel counters are).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use libp2p::core::muxing::{StreamMuxer, StreamMuxerBox, StreamMuxerEvent, SubstreamBox};
use libp2p::futures::{AsyncRead, AsyncWrite};
use serde_json::{Map, Value};

use crate::events;

/// The muxer of one connection to `peer` (its node id), whose substreams are tapped.
pub struct TapMuxer {
    inner: StreamMuxerBox,
    peer: Arc<str>,
}

impl TapMuxer {
    pub fn new(inner: StreamMuxerBox, peer: String) -> Self {
        TapMuxer { inner, peer: peer.into() }
    }
}

impl StreamMuxer for TapMuxer {
    type Substream = TapStream;
    type Error = io::Error;

    fn poll_inbound(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<TapStream, io::Error>> {
        let this = self.get_mut();
        Pin::new(&mut this.inner).poll_inbound(cx).map_ok(|s| TapStream::new(s, this.peer.clone(), false))
    }

    fn poll_outbound(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<TapStream, io::Error>> {
        let this = self.get_mut();
        Pin::new(&mut this.inner).poll_outbound(cx).map_ok(|s| TapStream::new(s, this.peer.clone(), true))
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<StreamMuxerEvent, io::Error>> {
        Pin::new(&mut self.get_mut().inner).poll(cx)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Negotiating,
    /// a GossipSub (or FloodSub) substream: frames are RPCs
    Pubsub,
    /// another protocol (identify, ...): not followed
    Other,
}

/// One direction of a substream: the bytes not yet parsed into whole length-prefixed messages.
#[derive(Default)]
struct Direction {
    buf: Vec<u8>,
    /// the last protocol this direction proposed or confirmed in multistream-select
    last_protocol: Option<Vec<u8>>,
}

pub struct TapStream {
    inner: SubstreamBox,
    peer: Arc<str>,
    /// we opened it (we are multistream-select's dialer: the remote is the listener, which confirms)
    outbound: bool,
    mode: Mode,
    read: Direction,
    write: Direction,
}

const MULTISTREAM_HEADER: &[u8] = b"/multistream/1.0.0\n";

impl TapStream {
    fn new(inner: SubstreamBox, peer: Arc<str>, outbound: bool) -> Self {
        TapStream {
            inner,
            peer,
            outbound,
            mode: Mode::Negotiating,
            read: Direction::default(),
            write: Direction::default(),
        }
    }

    /// Bytes that went through in one direction (`sent`: written by us).
    fn observe(&mut self, sent: bool, bytes: &[u8]) {
        if self.mode == Mode::Other || bytes.is_empty() {
            return;
        }
        let dir = if sent { &mut self.write } else { &mut self.read };
        dir.buf.extend_from_slice(bytes);
        let mut start = 0;
        loop {
            let dir = if sent { &mut self.write } else { &mut self.read };
            let Some((len, prefix)) = read_varint(&dir.buf[start..]) else { break };
            let end = start + prefix + len as usize;
            if len > (64 << 20) {
                self.mode = Mode::Other; // not a length-prefixed protocol we know: stop following it
                break;
            }
            if dir.buf.len() < end {
                break;
            }
            let message = dir.buf[start + prefix..end].to_vec();
            start = end;
            self.message(sent, &message);
            if self.mode == Mode::Other {
                break;
            }
        }
        let dir = if sent { &mut self.write } else { &mut self.read };
        if self.mode == Mode::Other {
            dir.buf = Vec::new();
        } else {
            dir.buf.drain(..start);
        }
    }

    /// One length-prefixed message in one direction.
    fn message(&mut self, sent: bool, message: &[u8]) {
        // the listener (the side that did not open the substream) confirms the protocol
        let from_listener = sent != self.outbound;
        if self.mode == Mode::Negotiating {
            let multistream = message.first() == Some(&b'/') || message == b"na\n" || message == b"ls\n";
            if multistream {
                if message == MULTISTREAM_HEADER || message == b"na\n" || message == b"ls\n" {
                    return;
                }
                let dir = if sent { &mut self.write } else { &mut self.read };
                dir.last_protocol = Some(message.to_vec());
                if from_listener {
                    self.settle(message);
                }
                return;
            }
            // data before the listener's confirmation: the dialer negotiated optimistically
            // ("lazy" multistream-select), on the protocol it proposed last
            let dir = if sent { &self.write } else { &self.read };
            match dir.last_protocol.clone() {
                Some(protocol) if !from_listener => self.settle(&protocol),
                _ => {
                    self.mode = Mode::Other;
                    return;
                }
            }
            if self.mode != Mode::Pubsub {
                return;
            }
        }
        if self.mode == Mode::Pubsub {
            match rpc_fields(message) {
                Some(mut fields) => {
                    fields.insert("peer".into(), Value::from(&*self.peer));
                    events::emit(if sent { "send_rpc" } else { "recv_rpc" }, Value::Object(fields));
                }
                None => eprintln!(
                    "rust-libp2p adapter: an RPC {} {} did not decode",
                    if sent { "to" } else { "from" },
                    self.peer
                ),
            }
        }
    }

    fn settle(&mut self, protocol: &[u8]) {
        self.mode = if protocol.starts_with(b"/meshsub/") || protocol.starts_with(b"/floodsub/") {
            Mode::Pubsub
        } else {
            Mode::Other
        };
    }
}

impl AsyncRead for TapStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            this.observe(false, &buf[..n]);
        }
        polled
    }
}

impl AsyncWrite for TapStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            this.observe(true, &buf[..n]);
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

// protobuf, as much as rpc.proto needs ---------------------------------------------------------------

/// An unsigned LEB128 varint at the start of `buf`: (value, bytes it took); None if incomplete.
fn read_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in buf.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

enum Field<'a> {
    Varint,
    Bytes(&'a [u8]),
}

/// The fields of one protobuf message, in order: (number, value); None if it does not parse.
fn fields(mut buf: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let (key, n) = read_varint(buf)?;
        buf = &buf[n..];
        let number = key >> 3;
        match key & 7 {
            0 => {
                let (_, n) = read_varint(buf)?;
                buf = &buf[n..];
                out.push((number, Field::Varint));
            }
            1 => {
                buf = buf.get(8..)?;
                out.push((number, Field::Varint));
            }
            2 => {
                let (len, n) = read_varint(buf)?;
                let body = buf.get(n..n.checked_add(len as usize)?)?;
                buf = &buf[n + len as usize..];
                out.push((number, Field::Bytes(body)));
            }
            5 => {
                buf = buf.get(4..)?;
                out.push((number, Field::Varint));
            }
            _ => return None,
        }
    }
    Some(out)
}

fn count(buf: &[u8], number: u64) -> Option<u64> {
    Some(fields(buf)?.iter().filter(|(n, _)| *n == number).count() as u64)
}

/// send_rpc/recv_rpc fields of one encoded RPC: bytes and data_bytes always; the counts (message ids
/// for IHAVE/IWANT/IDONTWANT, entries for GRAFT/PRUNE) and their entries' bytes only when present.
fn rpc_fields(rpc: &[u8]) -> Option<Map<String, Value>> {
    let (mut data_bytes, mut msgs, mut subs) = (0u64, 0u64, 0u64);
    // ihave, iwant, graft, prune, idontwant: (count, bytes), by ControlMessage's field numbers 1-5
    let mut control = [(0u64, 0u64); 5];
    for (number, field) in fields(rpc)? {
        match (number, field) {
            (1, Field::Bytes(_)) => subs += 1,
            (2, Field::Bytes(message)) => {
                msgs += 1;
                for (n, f) in fields(message)? {
                    if let (2, Field::Bytes(data)) = (n, f) {
                        data_bytes += data.len() as u64;
                    }
                }
            }
            (3, Field::Bytes(ctl)) => {
                for (n, f) in fields(ctl)? {
                    let Field::Bytes(entry) = f else { continue };
                    let entries = match n {
                        1 => count(entry, 2)?,     // ControlIHave.message_ids
                        2 | 5 => count(entry, 1)?, // ControlIWant / ControlIDontWant.message_ids
                        3 | 4 => 1,                // ControlGraft / ControlPrune: one topic
                        _ => continue,             // extensions (meshsub 1.3), ...
                    };
                    control[(n - 1) as usize].0 += entries;
                    control[(n - 1) as usize].1 += entry.len() as u64;
                }
            }
            _ => {}
        }
    }
    let mut out = Map::new();
    out.insert("bytes".into(), Value::from(rpc.len() as u64));
    out.insert("data_bytes".into(), Value::from(data_bytes));
    if msgs > 0 {
        out.insert("msgs".into(), Value::from(msgs));
    }
    if subs > 0 {
        out.insert("subs".into(), Value::from(subs));
    }
    for (kind, (n, bytes)) in ["ihave", "iwant", "graft", "prune", "idontwant"].iter().zip(control) {
        if n > 0 {
            out.insert((*kind).into(), Value::from(n));
            out.insert(format!("{kind}_bytes"), Value::from(bytes));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(number: u64, body: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3 | 2) as u8];
        let mut len = body.len();
        while len >= 0x80 {
            out.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn counts_ids_and_topics() {
        let ihave = [ld(1, b"t"), ld(2, &[1; 46]), ld(2, &[2; 46])].concat();
        let control = [ld(1, &ihave), ld(3, &ld(1, b"t")), ld(5, &ld(1, &[3; 46]))].concat();
        let message = [ld(1, &[9; 38]), ld(2, b"n1-1\nxyz"), ld(4, b"t")].concat();
        let rpc = [ld(1, &[8, 1]), ld(2, &message), ld(3, &control)].concat();
        let f = rpc_fields(&rpc).unwrap();
        assert_eq!(f["bytes"], rpc.len() as u64);
        assert_eq!(f["data_bytes"], 8);
        assert_eq!((f["msgs"].as_u64(), f["subs"].as_u64()), (Some(1), Some(1)));
        assert_eq!((f["ihave"].as_u64(), f["ihave_bytes"].as_u64()), (Some(2), Some(ihave.len() as u64)));
        assert_eq!((f["graft"].as_u64(), f["idontwant"].as_u64()), (Some(1), Some(1)));
        assert!(!f.contains_key("iwant") && !f.contains_key("prune"));
    }
}
