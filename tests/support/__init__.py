"""Helpers the tests share: the CLI in a subprocess, in-memory DHT networks, a stand-in Kubernetes
cluster, a hand-built run, common scenarios."""
