"""Scenarios more than one test runs."""

SMALL = """
name: small
seed: 5
nodes: {count: 8}
network: {latency: {model: constant, one_way: 20ms}}
topics: {count: 2, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 3, rate: 5/s, warmup: 1s, duration: 6s, drain: 2s, message_size: 2KiB}
faults: [{at: 2s, action: kill, nodes: [n7], restart_after: 2s}]
calibration: {pairs: 6, throughput_nodes: 2}
"""
