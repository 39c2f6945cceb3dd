"""libp2p pubsub messages and ids as a node of an in-memory network writes them (go's from || seqno ids,
StrictSign), for tests that hand a core frames of their own."""
from node.protocols.pubsub.messages import MessageIds
from node.protocols.pubsub.pubsub_pb2 import Message


def authored(net, origin: str, seqno: int, topic: str, data: bytes, *, scheme: str = "from-seqno",
             sign: bool = True) -> Message:
    """The message `origin` of `net` (anything with `.identities`) publishes as its seqno-th."""
    return MessageIds(origin, scheme, sign, net.identities).author(seqno, topic, data)


def wire_ids(net, *labels: str, scheme: str = "from-seqno") -> list[bytes]:
    """The wire form of message id labels (`n3-5`)."""
    ids = MessageIds("n0", scheme, False, net.identities)
    return [ids.to_wire(label) for label in labels]
