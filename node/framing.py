"""Data-plane framing: unsigned-varint length prefix + protobuf `Frame` (pure, no IO).

`FrameDecoder` is fed raw stream bytes and yields whole frames; a declared length above the limit
raises `FrameTooLarge` before any of it is buffered, so a peer cannot make a node allocate at will.
"""
from __future__ import annotations

from google.protobuf.message import DecodeError

from node.proto.frame_pb2 import Frame, Hello, Probe

__all__ = ["MAX_FRAME", "Frame", "Hello", "Probe", "DecodeError", "FrameTooLarge", "FrameDecoder", "encode_varint",
           "encode_frame"]


MAX_FRAME = 4 * 1024 * 1024  # the default frame limit of a node (node/config.py)


class FrameTooLarge(ValueError):
    pass


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_frame(frame: Frame) -> bytes:
    body = frame.SerializeToString()
    return encode_varint(len(body)) + body


class FrameDecoder:
    def __init__(self, max_frame: int):
        self.max_frame = max_frame
        self._buf = bytearray()

    def missing(self) -> int:
        """Bytes still to come before the frame at the head of the buffer is whole (0 while its length
        prefix is incomplete: the reader cannot know yet)."""
        length = 0
        for i in range(min(len(self._buf), 10)):
            byte = self._buf[i]
            length |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                return max(0, i + 1 + length - len(self._buf))
        return 0

    def feed(self, data: bytes) -> list[Frame]:
        """Add stream bytes; return the frames now complete. Raises FrameTooLarge or DecodeError."""
        self._buf += data
        frames = []
        while True:
            length, header = 0, 0
            for header in range(min(len(self._buf), 10)):
                byte = self._buf[header]
                length |= (byte & 0x7F) << (7 * header)
                if not byte & 0x80:
                    header += 1
                    break
            else:
                if len(self._buf) >= 10:
                    raise DecodeError("varint length prefix longer than 10 bytes")
                return frames  # length prefix not complete yet
            if length > self.max_frame:
                raise FrameTooLarge(f"frame of {length} bytes exceeds the limit of {self.max_frame}")
            if len(self._buf) < header + length:
                return frames
            frame = Frame()
            frame.ParseFromString(bytes(self._buf[header:header + length]))
            del self._buf[:header + length]
            frames.append(frame)
