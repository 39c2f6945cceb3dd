"""`peerlab clean` lists every run's Docker objects while other runs may be removing theirs: a container
gone between the engine's list and an inspect of it must not fail the clean (a CI run's did, beside the
docker tests)."""
from __future__ import annotations

from docker.errors import NotFound

from orchestrator.backends import docker as docker_backend
from orchestrator.backends.docker import LABEL, OWNER


class Entry:
    def __init__(self, attrs: dict):
        self.attrs = attrs


class Containers:
    """As docker-py's: `list` gets the engine's entries in one call, then (unless sparse) inspects each
    by its id, which raises NotFound for one removed in between."""

    def __init__(self, listed: list[dict], removed: set[str]):
        self.listed, self.removed = listed, removed

    def list(self, all: bool = False, filters: dict | None = None, sparse: bool = False) -> list[Entry]:
        assert all and filters == {"label": LABEL}
        if sparse:
            return [Entry(e) for e in self.listed]
        out = []
        for e in self.listed:
            if e["Id"] in self.removed:
                raise NotFound(f"No such container: {e['Id']}")
            out.append(Entry({"Id": e["Id"], "Config": {"Labels": e["Labels"]}}))
        return out


class Nothing:
    def list(self, filters: dict | None = None) -> list[Entry]:
        return []


class Client:
    def __init__(self, containers: Containers):
        self.containers, self.networks, self.volumes = containers, Nothing(), Nothing()


def test_a_container_removed_while_clean_lists_them_does_not_fail_it(monkeypatch):
    listed = [{"Id": "a1", "Labels": {LABEL: "c1ea4e", OWNER: "host/1"}},
              {"Id": "b2", "Labels": {LABEL: "0dd0ff", OWNER: "host/2"}}]
    monkeypatch.setattr(docker_backend, "docker_client", lambda: Client(Containers(listed, removed={"b2"})))
    assert docker_backend.docker_leftovers() == {"c1ea4e": "host/1", "0dd0ff": "host/2"}
