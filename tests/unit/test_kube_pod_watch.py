"""Waiting for a run's pods (KubeCluster.wait_pods) over scripted watches: an expired watch listed and
watched again, pods whose image the cluster cannot get or that failed named at once, a run stopped
while its pods start."""
from types import SimpleNamespace

import kubernetes.watch
import pytest
from kubernetes.client.exceptions import ApiException


def pod(name: str, ip: str) -> SimpleNamespace:
    running = SimpleNamespace(state=SimpleNamespace(running=True, waiting=None))
    return SimpleNamespace(metadata=SimpleNamespace(name=name),
                           status=SimpleNamespace(phase="Running", pod_ip=ip, container_statuses=[running, running],
                                                  conditions=[]))


def test_an_expired_watch_is_listed_and_watched_again(cluster, monkeypatch):
    rounds = iter([[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}],
                   ApiException(status=410, reason="Gone"),
                   [{"type": "ADDED", "object": pod("pl1-nodes-0", "10.0.0.5")},
                    {"type": "ADDED", "object": pod("pl1-nodes-1", "10.0.0.6")}]])
    calls: list = []

    class ScriptedWatch:
        def stream(self, fn, *args, **kwargs):
            calls.append(kwargs)
            step = next(rounds)
            if isinstance(step, Exception):
                raise step
            yield from step

        def stop(self):
            pass
    monkeypatch.setattr(kubernetes.watch, "Watch", ScriptedWatch)
    ips = cluster.wait_pods("peerlab.run=000001", ["pl1-nodes-0", "pl1-nodes-1"], timeout=10)
    assert ips == {"pl1-nodes-0": "10.0.0.5", "pl1-nodes-1": "10.0.0.6"}
    assert len(calls) == 3 and all(c["_request_timeout"] for c in calls)


def watch_of(pod: SimpleNamespace) -> type:
    """A watch that sees `pod` once, as it is, every time it is opened."""
    class ScriptedWatch:
        def stream(self, fn, *args, **kwargs):
            yield {"type": "ADDED", "object": pod}

        def stop(self):
            pass
    return ScriptedWatch


def test_pods_whose_image_the_cluster_cannot_get_are_named_with_how_to_give_it_the_image(cluster, monkeypatch):
    waiting = SimpleNamespace(state=SimpleNamespace(running=None, waiting=SimpleNamespace(reason="ImagePullBackOff")))
    stuck = SimpleNamespace(metadata=SimpleNamespace(name="pl1-nodes-0"),
                            status=SimpleNamespace(phase="Pending", pod_ip=None, container_statuses=[waiting, waiting],
                                                   conditions=[]))
    monkeypatch.setattr(kubernetes.watch, "Watch", watch_of(stuck))
    with pytest.raises(RuntimeError, match=r"pl1-nodes-0 \(Pending: ImagePullBackOff.*peerlab image build "
                                           r"--implementation all.*peerlab cluster load"):
        cluster.wait_pods("peerlab.run=000001", ["pl1-nodes-0"], timeout=0.5)


@pytest.mark.slow
def test_a_run_stopped_while_its_pods_start_stops_waiting_within_a_watch(cluster, monkeypatch):
    """A SIGTERM while 100 pods are being made: the wait ends within one watch's few seconds (a watch
    with nothing new blocks for its whole timeout, as the API server's does), not at its timeout."""
    import threading
    import time

    from orchestrator.backends import kube_cluster
    pending = SimpleNamespace(metadata=SimpleNamespace(name="pl1-nodes-0"),
                              status=SimpleNamespace(phase="Pending", pod_ip=None, container_statuses=[],
                                                     conditions=[]))

    class QuietWatch:
        def stream(self, fn, *args, timeout_seconds, **kwargs):
            yield {"type": "ADDED", "object": pending}
            time.sleep(timeout_seconds)

        def stop(self):
            pass
    monkeypatch.setattr(kubernetes.watch, "Watch", QuietWatch)
    stopping = threading.Event()
    threading.Timer(0.5, stopping.set).start()

    def check_stop():
        if stopping.is_set():
            raise InterruptedError("stopped by a signal")
    started = time.monotonic()
    with pytest.raises(InterruptedError):
        cluster.wait_pods("peerlab.run=000001", ["pl1-nodes-0"], timeout=60, check_stop=check_stop)
    assert time.monotonic() - started < kube_cluster.WATCH_S + 1.5


def test_a_pod_that_failed_is_named_at_once_with_why(cluster, monkeypatch):
    """A pod the kubelet refused or ended (here: no room on its node) never runs: the wait ends at its
    first sight, not after its timeout, naming the reason and the kubelet's message."""
    failed = SimpleNamespace(metadata=SimpleNamespace(name="pl1-nodes-0"),
                             status=SimpleNamespace(phase="Failed", pod_ip=None, container_statuses=[], conditions=[],
                                                    reason="OutOfcpu",
                                                    message="Pod Node didn't have enough resource: cpu"))
    monkeypatch.setattr(kubernetes.watch, "Watch", watch_of(failed))
    started = __import__("time").monotonic()
    with pytest.raises(RuntimeError, match=r"pod pl1-nodes-0 failed: OutOfcpu: Pod Node didn't have enough resource"):
        cluster.wait_pods("peerlab.run=000001", ["pl1-nodes-0"], timeout=30)
    assert __import__("time").monotonic() - started < 5
