"""Data-plane framing: round trips in any chunking; oversized and malformed input refused."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.framing import DecodeError, Frame, FrameDecoder, FrameTooLarge, Hello, Probe, encode_frame, encode_varint


@given(st.lists(st.binary(max_size=3000), max_size=20), st.integers(1, 97))
@settings(max_examples=200, deadline=None)
def test_frames_survive_any_chunking(payloads, chunk):
    frames = [Frame(rpc=p) for p in payloads] + [Frame(hello=Hello(node_id="n1", run_id="r"))]
    stream = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(1 << 20)
    out = []
    for i in range(0, len(stream), chunk):
        out += decoder.feed(stream[i:i + chunk])
    assert out == frames


@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=5), st.integers(1, 97))
@settings(max_examples=100, deadline=None)
def test_missing_is_what_the_head_frame_still_lacks(payloads, chunk):
    """The transport raises the socket's low-water mark to `missing()`: it must never ask for more
    than completes the frame at the head (the loop would wait for bytes that are not coming)."""
    stream = b"".join(encode_frame(Frame(rpc=p)) for p in payloads)
    decoder, fed, ends, i = FrameDecoder(1 << 20), 0, [], 0
    for p in payloads:
        i += len(encode_frame(Frame(rpc=p)))
        ends.append(i)
    while fed < len(stream):
        decoder.feed(stream[fed:fed + chunk])
        fed += chunk
        missing = decoder.missing()
        head_end = next((e for e in ends if e > fed), None)
        assert missing <= (head_end - fed if head_end else 0)
        if head_end is not None and missing:
            assert fed + missing == head_end


def test_oversized_frame_is_refused_before_buffering():
    decoder = FrameDecoder(1000)
    with pytest.raises(FrameTooLarge):
        decoder.feed(encode_varint(5_000_000))


def test_overlong_varint_is_malformed():
    with pytest.raises(DecodeError):
        FrameDecoder(1000).feed(b"\xff" * 11)


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_random_bytes_never_crash_the_decoder(data):
    try:
        FrameDecoder(1 << 16).feed(data)
    except (DecodeError, FrameTooLarge):
        pass


def test_probe_roundtrip():
    f = Frame(probe=Probe(kind=Probe.BULK, nonce=7, payload=b"x" * 456))
    (back,) = FrameDecoder(1000).feed(encode_frame(f))
    assert back.probe.payload == b"x" * 456 and back.WhichOneof("body") == "probe"
