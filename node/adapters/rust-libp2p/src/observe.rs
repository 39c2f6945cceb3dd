//! First copies and duplicates, each with the peer that sent it.
//!
//! rust-libp2p's GossipSub reports first copies (`Event::Message`, with `propagation_source`) but drops
//! duplicates silently. `Observed` wraps the behaviour and sees every RPC its connection handlers hand
//! to it (`on_connection_handler_event`: the decoded, signature-checked messages of one RPC and the
//! peer it came from) just before the behaviour handles it. A copy whose id (from || seqno) this node
//! has seen before, published or received, is a `duplicate_message` from that peer; the first copy is
//! the `deliver_message` of the behaviour's `Event::Message`. Copies the handler refused (signature,
//! size) are `reject_message`. Everything else is passed through. In the gossipsub-interop mode
//! (interop.rs) ids are a message's first 8 bytes and every copy is a `Received Message` line.

use std::collections::hash_map::DefaultHasher;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::task::{Context, Poll};

use libp2p::core::transport::PortUse;
use libp2p::core::Endpoint;
use libp2p::gossipsub;
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, THandler, THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId};
use serde_json::json;

use crate::events;

/// What the connection handlers of gossipsub::Behaviour report (the type is public but not exported).
type HandlerOut = THandlerOutEvent<gossipsub::Behaviour>;

pub struct Observed {
    pub inner: gossipsub::Behaviour,
    /// hash of a message id -> whether its first copy was logged
    seen: HashMap<u64, bool>,
    contract: Contract,
}

/// Which contract the node speaks: its message ids and where a duplicate is said.
#[derive(Clone, Copy)]
pub enum Contract {
    /// peerlab's: ids from || seqno, a duplicate is a `duplicate_message` event
    Peerlab,
    /// gossipsub-interop's: ids are a message's first 8 bytes, every copy a `Received Message` line
    Interop,
}

/// The contract's message name: the payload up to its first newline.
pub fn label(data: &[u8]) -> String {
    let end = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end]).into_owned()
}

/// go-libp2p-pubsub's default message id: the origin's peer id (binary) then the 8-byte big-endian
/// sequence number.
pub fn message_id(source: Option<&PeerId>, sequence_number: Option<u64>) -> Vec<u8> {
    let mut id = source.map(|p| p.to_bytes()).unwrap_or_default();
    id.extend_from_slice(&sequence_number.unwrap_or_default().to_be_bytes());
    id
}

fn key(id: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

impl Observed {
    pub fn new(inner: gossipsub::Behaviour, contract: Contract) -> Self {
        Observed { inner, seen: HashMap::new(), contract }
    }

    fn id(&self, message: &gossipsub::RawMessage) -> Vec<u8> {
        match self.contract {
            Contract::Peerlab => message_id(message.source.as_ref(), message.sequence_number),
            Contract::Interop => crate::interop::message_id(&message.data),
        }
    }

    /// A message this node published: copies coming back are duplicates.
    pub fn published(&mut self, id: &[u8]) {
        self.seen.insert(key(id), true);
    }

    /// The behaviour's first copy: true if it is to be logged as delivered (false: it was logged
    /// already, the library's seen cache having forgotten the id since).
    pub fn first_copy(&mut self, id: &[u8]) -> bool {
        let delivered = self.seen.entry(key(id)).or_insert(false);
        !std::mem::replace(delivered, true)
    }
}

impl NetworkBehaviour for Observed {
    type ConnectionHandler = <gossipsub::Behaviour as NetworkBehaviour>::ConnectionHandler;
    type ToSwarm = gossipsub::Event;

    fn handle_pending_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        self.inner.handle_pending_inbound_connection(connection_id, local_addr, remote_addr)
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.inner.handle_established_inbound_connection(connection_id, peer, local_addr, remote_addr)
    }

    fn handle_pending_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        maybe_peer: Option<PeerId>,
        addresses: &[Multiaddr],
        effective_role: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        self.inner.handle_pending_outbound_connection(connection_id, maybe_peer, addresses, effective_role)
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        addr: &Multiaddr,
        role_override: Endpoint,
        port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.inner.handle_established_outbound_connection(connection_id, peer, addr, role_override, port_use)
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        self.inner.on_swarm_event(event)
    }

    fn on_connection_handler_event(&mut self, peer: PeerId, connection: ConnectionId, event: HandlerOut) {
        if let HandlerOut::Message { rpc, invalid_messages } = &event {
            // copies the handler refused (bad signature, over the size limit, ...): logged, never delivered
            for (message, error) in invalid_messages.iter().filter(|_| matches!(self.contract, Contract::Peerlab)) {
                events::emit(
                    "reject_message",
                    json!({
                        "topic": message.topic.as_str(), "msg_id": label(&message.data),
                        "peer": events::name(&peer), "reason": format!("{error:?}"),
                    }),
                );
            }
            for message in &rpc.messages {
                let id = key(&self.id(message));
                // first time: the behaviour will report it (Event::Message) if it is of a topic this
                // node subscribes to; from then on a copy is a duplicate, as for the behaviour
                if let Entry::Vacant(first) = self.seen.entry(id) {
                    first.insert(false);
                    continue;
                }
                match self.contract {
                    Contract::Peerlab => events::emit(
                        "duplicate_message",
                        json!({
                            "topic": message.topic.as_str(), "msg_id": label(&message.data),
                            "peer": events::name(&peer), "size": message.data.len(),
                        }),
                    ),
                    Contract::Interop => crate::interop::received(&message.data, &peer, message.topic.as_str()),
                }
            }
        }
        self.inner.on_connection_handler_event(peer, connection, event)
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        self.inner.poll(cx)
    }
}
