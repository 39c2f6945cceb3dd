"""Our RPC encoding against libp2p's pubsub field numbers, checked with an independent hand encoder
(varint tags per the spec), both ways."""
from node.protocols.pubsub.pubsub_pb2 import RPC, ControlIDontWant, ControlIHave, ControlMessage, ControlPrune, Message


def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, payload):
    """A length-delimited field (wire type 2)."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def vfield(num, value):
    return varint(num << 3) + varint(value)


def test_spec_field_numbers_both_ways():
    # RPC{subscriptions=1{subscribe=1, topicid=2}, publish=2{from=1,data=2,seqno=3,topic=4}, control=3{
    #   ihave=1{topicID=1, messageIDs=2}, prune=4{topicID=1, backoff=3}, idontwant=5{messageIDs=1}}}
    sub = vfield(1, 1) + field(2, b"blocks")
    msg = field(1, b"n1") + field(2, b"payload") + field(3, (7).to_bytes(8, "big")) + field(4, b"blocks")
    ctl = (field(1, field(1, b"blocks") + field(2, b"id1")) + field(4, field(1, b"blocks") + vfield(3, 60))
           + field(5, field(1, b"id2")))
    wire = field(1, sub) + field(2, msg) + field(3, ctl)

    ours = RPC(subscriptions=[RPC.SubOpts(subscribe=True, topicid="blocks")],
               publish=[Message(**{"from": b"n1", "data": b"payload", "seqno": (7).to_bytes(8, "big"), "topic": "blocks"})],
               control=ControlMessage(ihave=[ControlIHave(topicID="blocks", messageIDs=[b"id1"])],
                                      prune=[ControlPrune(topicID="blocks", backoff=60)],
                                      idontwant=[ControlIDontWant(messageIDs=[b"id2"])]))
    assert ours.SerializeToString() == wire
    back = RPC()
    back.ParseFromString(wire)
    assert back == ours
