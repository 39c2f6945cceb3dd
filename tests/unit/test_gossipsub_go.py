"""GossipSub as go-libp2p-pubsub does it, so that figures compare with go's: message ids and signing
(pubsub.go DefaultMsgIdFn, sign.go), the counting rules of gossipsub.go (heartbeat, emitGossip,
handleIHave, handleIDontWant, handlePrune, pxConnect, makePrune) and gossip_tracer.go, direct peers,
peer exchange, the bootstrapper's D = 0, and the presets. Each test names the go function it follows."""
import base58
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from node import contract
from node.protocols.gossipsub.core import GossipSub, GossipSubParams
from node.protocols.gossipsub.params import GO_DEFAULTS
from node.protocols.pubsub import pubsub_pb2 as pb
from node.protocols.pubsub.messages import SIGN_PREFIX
from node.simulated.virtual_network import MemNetwork
from tests.support.pubsub import authored, wire_ids
from tests.unit.test_gossipsub import network


def frame(**control) -> bytes:
    return pb.RPC(control=pb.ControlMessage(**control)).SerializeToString()


def sent(net, node, since=0, **has):
    return [e for e in net.nodes[node].events[since:]
            if e["type"] == "send_rpc" and all(e.get(k) for k in has)]


def star(leaves: int, seed=1, **params):
    """n0 connected to n1..n<leaves>, all subscribed to t."""
    # the leaves graft n0 at 1.1 s, n0's heartbeat at 2.1 s trims its mesh
    return MemNetwork.star(GossipSub, GossipSubParams(**params), leaves, topic="t", seed=seed, until=2.5)


# ids and signing --------------------------------------------------------------------------------------
def test_a_message_carries_the_origins_peer_id_a_46_byte_id_and_an_ed25519_signature():
    """pubsub.go DefaultMsgIdFn (from || seqno) and sign.go signMessage: `from` is the origin's binary
    peer id (the same as js- and py-libp2p derive from the node's seed), the signature is Ed25519 over
    "libp2p-pubsub:" + the message without signature and key, and no key is attached (the peer id
    inlines it). A 1 KiB message on topic t is 1149 bytes on the wire, an IDONTWANT with one id 52."""
    net = network(n=3, degree=4)
    net.run(until=3)
    mid = net.nodes["n0"].core.publish("t", b"k" * 1024)
    net.run(until=4)
    msg = net.nodes["n0"].core.mcache[mid]
    sender = getattr(msg, "from")
    assert base58.b58encode(sender).decode() == contract.peer_id(contract.identity_seed(1, "n0"))
    assert len(sender) == 38 and len(msg.seqno) == 8 and not msg.key and len(msg.signature) == 64
    assert wire_ids(net, mid) == [sender + msg.seqno]
    bare = pb.Message()
    bare.CopyFrom(msg)
    bare.ClearField("signature")
    Ed25519PublicKey.from_public_bytes(sender[6:]).verify(msg.signature, SIGN_PREFIX + bare.SerializeToString())
    (first,) = [e for e in sent(net, "n0", msgs=True)][:1]
    assert first["bytes"] == 1149 and first["data_bytes"] == 1024
    idw = [e for e in net.events("send_rpc") if e.get("idontwant")]
    assert idw and all(e["bytes"] == 52 and e["idontwant_bytes"] == 48 for e in idw)
    assert {e["msg_id"] for e in net.events("deliver_message")} == {mid}
    assert {e["origin"] for e in net.events("deliver_message")} == {"n0"}


def test_an_ihave_with_ten_ids_is_the_size_go_sends():
    """gossipsub.go emitGossip: one IHAVE entry per topic with the ids of the gossip windows; 10
    from || seqno ids on topic t make a 489-byte RPC (peerlab's earlier short ids made 81)."""
    net = star(8, D=1, D_lo=1, D_hi=1, D_out=0, D_lazy=7)
    core = net.nodes["n0"].core
    for _ in range(10):
        core.publish("t", b"g" * 10)
    start = len(net.nodes["n0"].events)
    core.heartbeat()
    ihaves = sent(net, "n0", start, ihave=True)
    assert ihaves and all(e["ihave"] == 10 and e["bytes"] == 489 for e in ihaves)


def test_messages_without_a_valid_signature_are_rejected_and_scored():
    """StrictSign (pubsub.go checkSigningPolicy, sign.go verifyMessageSignature): an unsigned message is
    rejected before the seen check, a badly signed one after it; both count as invalid deliveries of
    the sender (score.go RejectMessage -> markInvalidMessageDelivery). With sign off, both pass."""
    net = network(n=3, degree=4)
    net.run(until=3)
    core = net.nodes["n0"].core
    unsigned = authored(net, "n2", 7, "t", b"u" * 100, sign=False)
    forged = authored(net, "n2", 8, "t", b"f" * 100)
    forged.data = b"F" * 100
    stolen = authored(net, "n2", 9, "t", b"s" * 100)
    setattr(stolen, "from", net.identities.peer_id("n1"))  # n2's signature, n1's name
    for msg in (unsigned, forged, stolen):
        core.on_frame("n1", pb.RPC(publish=[msg]).SerializeToString())
    reasons = [e["reason"] for e in net.nodes["n0"].events if e["type"] == "reject_message"]
    assert reasons == ["missing signature", "invalid signature", "invalid signature"]
    assert not [e for e in net.nodes["n0"].events if e["type"] == "deliver_message"]
    assert core.score.peers["n1"].topics["t"].invalid == 3

    lax = network(n=3, degree=4, sign=False)
    lax.run(until=3)
    lax.nodes["n0"].core.on_frame("n1", pb.RPC(publish=[authored(lax, "n2", 7, "t", b"u" * 100, sign=False)]).SerializeToString())
    assert [e["msg_id"] for e in lax.nodes["n0"].events if e["type"] == "deliver_message"] == ["n2-7"]


def test_hash_ids_are_20_bytes_of_sha256_and_short_ids_are_the_old_text_form():
    """msg_id: hash (a content id, as Ethereum's 20-byte ids) and msg_id: short (peerlab's earlier
    `n3-5` ids, node ids in `from`, unsigned: signing them is refused)."""
    for scheme, id_len in (("hash", 20), ("short", None)):
        net = network(n=4, degree=6, msg_id=scheme)
        net.run(until=3)
        mid = net.nodes["n0"].core.publish("t", b"h" * 2000)
        net.run(until=5)
        assert {e["msg_id"] for e in net.events("deliver_message")} == {mid}
        assert len(net.events("deliver_message")) == 3
        raw = wire_ids(net, mid, scheme=scheme)[0]
        assert len(raw) == (id_len or len(mid)), raw
        if scheme == "short":
            assert raw == mid.encode() == b"n0-" + mid.split("-")[1].encode()
            assert not net.nodes["n0"].core.mcache[mid].signature
    with pytest.raises(ValidationError, match="sign"):
        GossipSubParams(msg_id="short", sign=True)


# counting rules ---------------------------------------------------------------------------------------
def test_the_mesh_is_pruned_to_D_when_it_reaches_D_hi():
    """gossipsub.go heartbeat: `if len(peers) >= gs.params.Dhi` prune to D (not only above D_hi)."""
    net = star(14, D=6, D_lo=4, D_hi=12, D_out=0)
    core = net.nodes["n0"].core
    core.mesh["t"] = {f"n{i}" for i in range(1, 13)}  # exactly D_hi
    core.heartbeat()
    assert len(core.mesh["t"]) == 6


def test_the_gossip_target_is_truncated():
    """gossipsub.go emitGossip: target = max(D_lazy, int(GossipFactor x eligible)); 30 eligible peers
    and factor 0.25 give 7 (rounding up gave 8)."""
    net = star(31, D=1, D_lo=1, D_hi=1, D_out=0, D_lazy=6, gossip_factor=0.25)
    core = net.nodes["n0"].core
    assert len(core.mesh["t"]) == 1
    core.publish("t", b"x" * 10)
    start = len(net.nodes["n0"].events)
    core.heartbeat()
    assert len(sent(net, "n0", start, ihave=True)) == 7


def test_the_ihave_limit_counts_rpcs_not_entries():
    """gossipsub.go handleIHave: peerhave counts RPCs (max_ihave_messages per heartbeat); one RPC with
    20 IHAVE entries of one id each gets all 20 ids asked (counting entries asked for 10)."""
    net = network(n=3, degree=4, max_ihave_messages=10)
    net.run(until=3)
    core = net.nodes["n0"].core
    entries = [pb.ControlIHave(topicID="t", messageIDs=wire_ids(net, f"n2-{1000 + i}")) for i in range(20)]
    start = len(net.nodes["n0"].events)
    core.on_frame("n1", frame(ihave=entries))
    (iwant,) = sent(net, "n0", start, iwant=True)
    assert iwant["iwant"] == 20
    # the 11th RPC with control in one heartbeat is not answered
    for i in range(10):
        core.on_frame("n1", frame(ihave=[pb.ControlIHave(topicID="t", messageIDs=wire_ids(net, f"n2-{2000 + i}"))]))
    assert len(sent(net, "n0", start, iwant=True)) == 10


def test_the_idontwant_id_cap_applies_per_rpc():
    """gossipsub.go handleIDontWant: at most MaxIDontWantLength (10) ids per RPC, over all its entries."""
    net = network(n=3, degree=4)
    net.run(until=3)
    core = net.nodes["n0"].core
    entries = [pb.ControlIDontWant(messageIDs=wire_ids(net, *[f"n2-{e * 10 + i}" for i in range(10)])) for e in range(2)]
    core.on_frame("n1", frame(idontwant=entries))
    assert sorted(core.dontwant["n1"]) == sorted(f"n2-{i}" for i in range(10))


def test_a_prune_with_backoff_0_backs_off_for_the_default_and_one_for_an_unjoined_topic_is_ignored():
    """gossipsub.go handlePrune: a backoff of 0 falls back to PruneBackoff; a PRUNE for a topic not
    joined changes nothing (no backoff, no PX)."""
    net = network(n=8, degree=6, prune_backoff=60)
    net.run(until=3)
    core = net.nodes["n0"].core
    peer = sorted(core.mesh["t"])[0]
    core.on_frame(peer, frame(prune=[pb.ControlPrune(topicID="t", backoff=0)]))
    assert core.backoff[("t", peer)] == pytest.approx(net.now + 60)
    core.on_frame(peer, frame(prune=[pb.ControlPrune(topicID="other", backoff=5,
                                                     peers=[pb.PeerInfo(peerID=net.identities.peer_id("n7"))])]))
    assert ("other", peer) not in core.backoff


def test_px_dials_at_most_prune_peers():
    """gossipsub.go pxConnect: a PX list longer than PrunePeers (16) is cut to 16 at random."""
    net = network(n=4, degree=6)
    for i in range(100, 120):
        net.add_node(f"n{i}", GossipSub, net.nodes["n0"].core.params)
    net.run(until=3)
    core = net.nodes["n0"].core
    peer = sorted(core.mesh["t"])[0]
    before = set(core.peer_topics)
    offered = [pb.PeerInfo(peerID=net.identities.peer_id(f"n{i}")) for i in range(100, 120)]
    core.on_frame(peer, frame(prune=[pb.ControlPrune(topicID="t", peers=offered)]))
    net.run(until=net.now + 1)
    assert len(set(core.peer_topics) - before) == 16


# direct peers, PX, bootstrappers, presets ------------------------------------------------------------
def test_direct_peers_get_every_message_never_join_the_mesh_and_are_redialled():
    """gossipsub.go WithDirectPeers: messages always go to direct peers in the topic; they are never
    grafted (a GRAFT from one is answered with PRUNE) nor gossiped to; directConnect redials them
    every DirectConnectTicks heartbeats."""
    net = star(8, D=2, D_lo=1, D_hi=3, D_out=0, direct_peers=["n5"], direct_connect_ticks=3)
    core = net.nodes["n0"].core
    net.run(until=6)
    assert "n5" not in core.mesh["t"]
    for i in range(5):
        mid = core.publish("t", b"d" * 100)
        net.run(until=net.now + 0.5)
        assert any(e["msg_id"] == mid for e in net.nodes["n5"].events if e["type"] == "deliver_message")
    start = len(net.nodes["n0"].events)
    core.on_frame("n5", frame(graft=[pb.ControlGraft(topicID="t")]))
    net.run(until=net.now + 0.1)
    assert "n5" not in core.mesh["t"] and sent(net, "n0", start, prune=True)[0]["peer"] == "n5"
    net.disconnect("n0", "n5")
    assert "n5" not in core.peer_topics
    net.run(until=net.now + 4)
    assert "n5" in core.peer_topics


def test_px_is_sent_with_a_prune_when_do_px_is_on():
    """gossipsub.go makePrune: with peer exchange on, a PRUNE of an oversubscribed mesh carries up to
    PrunePeers topic peers (binary peer ids, no signed records), never the pruned peer, and the pruned
    peer dials them (handlePrune -> pxConnect); off, none."""
    for do_px in (True, False):
        net = star(20, D=4, D_lo=3, D_hi=6, D_out=0, prune_peers=5)  # leaves know only n0 so far
        core = net.nodes["n0"].core
        core.params = core.params.model_copy(update={"do_px": do_px})
        core.mesh["t"] = {f"n{i}" for i in range(1, 11)}
        start = len(net.nodes["n0"].events)
        core.heartbeat()
        pruned = {f"n{i}" for i in range(1, 11)} - core.mesh["t"]
        prunes = sent(net, "n0", start, prune=True)
        assert len(pruned) == 6 and {e["peer"] for e in prunes} == pruned
        # a PRUNE is topic (3) + backoff (2) bytes, plus 42 bytes per PX peer id
        assert all(e["prune_bytes"] == (5 + 5 * 42 if do_px else 5) for e in prunes), prunes
        net.run(until=net.now + 0.5)  # the pruned leaves (scoring off: PX accepted) dial what they got
        for leaf in pruned:
            others = set(net.nodes[leaf].core.peer_topics) - {"n0"}
            # its 5 from PX, and any other pruned leaf that was offered it
            assert (len(others) >= 5 if do_px else not others) and leaf not in others, (leaf, others)


def test_a_bootstrapper_with_D_0_keeps_no_mesh():
    """gossipsub.go validate: D = D_lo = D_hi = D_out = 0 is allowed (the v1.1 spec's bootstrapper);
    every peer that grafts it is pruned by the next heartbeat. D = 0 alone is refused."""
    with pytest.raises(ValidationError, match="bootstrapper"):
        GossipSubParams(D=0)
    net = MemNetwork(seed=1, latency=0.01)
    boot = GossipSubParams(D=0, D_lo=0, D_hi=0, D_out=0)
    normal = GossipSubParams(D=2, D_lo=1, D_hi=3, D_out=0)
    net.add_node("n0", GossipSub, boot)
    for i in range(1, 6):
        net.add_node(f"n{i}", GossipSub, normal)
        net.connect(f"n{i}", "n0")
    net.run(until=0.5)
    for node in net.nodes.values():
        node.core.subscribe("t")
    net.run(until=5)
    assert net.nodes["n0"].core.mesh["t"] == set()
    assert all("n0" not in net.nodes[f"n{i}"].core.mesh["t"] for i in range(1, 6))


def test_presets_set_every_parameter_and_explicit_values_win():
    """preset: go-defaults equals gossipsub.go's DefaultGossipSubParams and router defaults; table-ii
    the GossipSub seed's Table II; a value given beside a preset wins."""
    go = GossipSubParams(preset="go-defaults")
    assert {k: getattr(go, k) for k in GO_DEFAULTS} == GO_DEFAULTS
    assert (go.D_lo, go.flood_publish, go.do_px, go.prune_peers, go.max_idontwant_length) == (5, False, False, 16, 10)
    assert GossipSubParams().model_dump() == {**go.model_dump(), "preset": None}
    t2 = GossipSubParams(preset="table-ii", D_lazy=8)
    assert (t2.D, t2.D_lo, t2.D_hi, t2.D_lazy, t2.gossip_factor, t2.flood_publish) == (8, 6, 12, 8, 0.05, False)
    with pytest.raises(ValidationError, match="preset"):
        GossipSubParams(preset="rust-defaults")


def test_the_router_benchmark_relays_signed_messages():
    """`peerlab bench router` feeds the relay messages its neighbour signed: every one is relayed to
    the rest of the mesh (a benchmark of rejected messages would time nothing)."""
    from orchestrator.tools.bench_runs import bench_router

    (result,) = bench_router([1024], messages=20)
    assert result["relayed_copies"] == 20 * (result["mesh"] - 1)
