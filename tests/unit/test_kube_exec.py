"""Exec into a pod through the API server (orchestrator/backends/kube_exec.py, kube_cluster.py), against
the kubernetes library's own stream client in scripted states: no Kubernetes server can run here. Each
test is a failure mode of a real API server: a REST call racing an exec, an exec stream that closes
without a status or never ends, a handshake that hangs, a long-lived command's lines split over frames
and its end with a traceback on stderr."""
import functools

import kubernetes.stream
import pytest
from kubernetes.stream import stream as real_stream
from kubernetes.stream.ws_client import WSClient

from orchestrator.backends import kube_exec
from orchestrator.backends.kube_exec import NO_STATUS, TIMED_OUT, ExecResult


def closed_stream(stdout: str = "", stderr: str = "", status: str | None = '{"status": "Success"}') -> WSClient:
    """The library's own WSClient in the state a finished exec leaves it: socket closed, channels
    buffered (1 stdout, 2 stderr, 3 the status; no status when the connection just dropped)."""
    ws = WSClient.__new__(WSClient)
    ws._connected, ws._returncode, ws.binary, ws.newline = False, None, False, "\n"
    ws._channels = {k: v for k, v in {1: stdout, 2: stderr, 3: status}.items() if v}
    ws._closed_channels = set()
    ws.sock = None
    ws.close = lambda **_: None
    return ws


class HangingStream:
    """A command that never ends: the socket stays open and nothing more arrives."""

    def write_stdin(self, data):
        pass

    def run_forever(self, timeout=None):
        assert timeout, "would wait forever"

    def is_open(self):
        return True

    def read_stdout(self, timeout=None):
        assert timeout == 0, "a read without a timeout on an open socket blocks forever"
        return "partial"

    read_stderr = read_stdout

    def close(self):
        pass


def scripted_stream(monkeypatch, answer, seen: list):
    """kubernetes.stream.stream with its real client swapping, over a scripted transport that notes
    what the shared client's call_api was while the exec connected."""
    def websocket_call(configuration, method, url, **kwargs):
        seen.append(url)
        return answer
    monkeypatch.setattr(kubernetes.stream, "stream",
                        functools.partial(real_stream.func, websocket_call, None))


def test_exec_runs_on_its_own_client_so_rest_calls_meanwhile_stay_rest(cluster, monkeypatch):
    shared = cluster.core.api_client.call_api
    during: list = []

    def websocket_call(configuration, method, url, **kwargs):
        during.append(cluster.core.api_client.call_api == shared)  # what another thread's REST call would use
        return closed_stream('{"running": false}\n')
    monkeypatch.setattr(kubernetes.stream, "stream", functools.partial(real_stream.func, websocket_call, None))
    result = cluster.exec("pl1-nodes-0", "node", ["true"])
    assert result == ExecResult(0, '{"running": false}\n', "")
    assert during == [True]


def test_a_stream_closed_without_status_is_a_failure_not_a_crash(cluster, monkeypatch):
    seen: list = []
    scripted_stream(monkeypatch, closed_stream("half an answ", status=None), seen)
    result = cluster.exec("pl1-nodes-0", "node", ["cat", "/x"])
    assert result.code == NO_STATUS and "without an exit status" in result.stderr
    assert "/exec?" in seen[0] and "container=node" in seen[0]


def test_a_command_that_never_ends_returns_after_its_timeout(cluster, monkeypatch):
    scripted_stream(monkeypatch, HangingStream(), [])
    result = cluster.exec("pl1-nodes-0", "node", ["sleep", "1000"], timeout=0.1)
    assert result.code == TIMED_OUT and result.stdout == "partial" and "did not end within" in result.stderr


def test_an_exec_whose_handshake_hangs_fails_after_the_connect_timeout(cluster, monkeypatch):
    monkeypatch.setattr(kube_exec, "CONNECT_TIMEOUT", 0.2)
    monkeypatch.setattr(kubernetes.stream, "stream", lambda *a, **k: __import__("time").sleep(5))
    with pytest.raises(RuntimeError, match="no answer from the API server"):
        cluster.exec("pl1-nodes-0", "node", ["true"])


class LineStream:
    """An open exec stream of a long-lived command: what it prints arrives in the frames given, then
    the socket closes (or, with `stays_open`, nothing more comes)."""

    def __init__(self, frames: list[tuple[int, str]], stays_open: bool = False):
        self.frames, self.stays_open, self.sent = list(frames), stays_open, []
        self.ws = closed_stream("", "", status=None)

    def write_stdin(self, data):
        self.sent.append(data)

    def readline_stdout(self, timeout=None):
        while True:
            data = self.ws._channels.get(1, "")
            if "\n" in data:
                line, _, rest = data.partition("\n")
                self.ws._channels[1] = rest
                return line
            if not self.frames:
                return None
            channel, text = self.frames.pop(0)
            self.ws._channels[channel] = self.ws._channels.get(channel, "") + text

    def peek_stderr(self):
        return bool(self.ws._channels.get(2))

    def read_stderr(self):
        return self.ws._channels.pop(2, "")

    def is_open(self):
        return self.stays_open

    def close(self):
        pass


def test_a_long_lived_command_is_spoken_to_a_line_at_a_time_and_its_end_says_why():
    stream = LineStream([(1, '{"done": [1'), (1, ']}\n{"done"'), (2, "Traceback ...\nOSError: no such device\n"),
                         (1, ": []}\n")])
    lines = kube_exec.ExecLines(stream, "pl1-nodes-0")
    lines.send('{"ops": []}')
    assert stream.sent == ['{"ops": []}\n']
    assert lines.receive(5) == '{"done": [1]}'  # a line split over frames comes whole
    assert lines.receive(5) == '{"done": []}'
    with pytest.raises(RuntimeError, match="pod pl1-nodes-0 closed: Traceback ...\nOSError: no such device"):
        lines.receive(5)
    silent = kube_exec.ExecLines(LineStream([], stays_open=True), "pl1-nodes-1")
    with pytest.raises(RuntimeError, match="pl1-nodes-1 gave no line in 2 s"):
        silent.receive(2)
