"""The data plane's wire schema: frame.proto, the envelope every peerlab frame travels in (hello, rpc,
probe), and frame_pb2.py, generated from it (`make proto`); node/framing.py wraps it.

May import: google.protobuf only; nothing else of node/, nor of orchestrator or analysis (node/framing.py
imports it, never the reverse).
"""
