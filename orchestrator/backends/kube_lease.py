"""Who owns a Helm release: the Lease a live orchestrator renews, and the releases whose lease lapsed.

A run on the kubernetes backend creates a coordination.k8s.io Lease named after its release
(`pl<short>`, labelled `peerlab.run=<short>`, holder `<host>/<pid>`) before `helm install`, renews it
every RENEW_S seconds while it runs, and deletes it after `helm uninstall`. An orchestrator that dies
(SIGKILL, a lost laptop, a CI job cancelled) stops renewing; LEASE_S seconds after the last renewal its
release is an orphan, and `peerlab clean --kubernetes` uninstalls it from any machine that can reach
the cluster. A release with no lease at all was installed by hand or by a peerlab before leases; it is
an orphan too. A lease never touches a run whose orchestrator is alive: it is renewed four times per
period, so only an orchestrator that stopped (or lost the API server for a whole minute) lets it lapse.
"""
from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from orchestrator.record import host_state

LABEL = "peerlab.run"
LEASE_S = 60    # a lease not renewed for this long belongs to a dead orchestrator
RENEW_S = 15.0
RELEASE = re.compile(r"^pl[0-9a-f]{6}$")


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def holder() -> str:
    return host_state.holder()


class RunLease:
    """The lease of one release, renewed by a daemon thread from `hold()` until `drop()`."""

    def __init__(self, api_client: Any, namespace: str, release: str):
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.release = namespace, release
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> dict[str, Any]:
        stamp = now_utc()
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.release, "labels": {LABEL: self.release[2:]}},
                "spec": {"holderIdentity": holder(), "leaseDurationSeconds": LEASE_S,
                         "acquireTime": stamp.isoformat(), "renewTime": stamp.isoformat()}}

    def hold(self) -> None:
        """Create the lease (before the release exists) and start renewing it."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.create_namespaced_lease(self.namespace, self._body(), _request_timeout=30)
        except ApiException as err:
            if err.status == 403:
                raise RuntimeError(
                    f"your Kubernetes user may not create leases (coordination.k8s.io) in namespace "
                    f"{self.namespace}: grant get, list, create, patch and delete on leases there (a Role and "
                    "RoleBinding); a run holds one so that `peerlab clean --kubernetes` can tell it from an "
                    "orphan") from None
            if err.status != 409:  # 409: ours from an earlier attempt of this run; renewing takes it over
                raise RuntimeError(f"could not create the run's lease {self.release} in namespace "
                                   f"{self.namespace}: {err.status} {err.reason}") from None
            self.renew()
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.release}", daemon=True)
        self._thread.start()

    def renew(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.patch_namespaced_lease(self.release, self.namespace, {"spec": {
                "holderIdentity": holder(), "renewTime": now_utc().isoformat()}}, _request_timeout=30)
        except ApiException as err:
            if err.status != 404:
                raise
            self.api.create_namespaced_lease(self.namespace, self._body(), _request_timeout=30)  # deleted by hand

    def _renew_loop(self) -> None:
        failing = False
        while not self._stop.wait(RENEW_S):
            try:
                self.renew()
                failing = False
            except Exception as err:  # noqa: BLE001 - the run goes on; the next renewal may get through
                if not failing:
                    print(f"warning: could not renew the lease of {self.release} ({err.__class__.__name__}); "
                          f"after {LEASE_S} s without one, `peerlab clean --kubernetes` may uninstall the run",
                          file=sys.stderr, flush=True)
                failing = True

    def drop(self) -> None:
        """Stop renewing and delete the lease (after the release is gone)."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        delete_lease(self.api.api_client, self.namespace, self.release)


@dataclass
class Owner:
    """A peerlab release (or a lease left without one) and what its lease says of its orchestrator."""

    release: str
    installed: bool
    holder: str | None = None
    renewed: datetime | None = None
    duration_s: int = LEASE_S

    def gone_from_this_host(self) -> bool:
        """The holder ran on this host (its name) and no process has its pid any more: it died without
        dropping the lease (SIGKILL, a crash), so there is no need to wait for the lease to lapse."""
        return host_state.holder_here(self.holder or "") is False

    def alive(self, now: datetime) -> bool:
        return (self.renewed is not None and now - self.renewed <= timedelta(seconds=self.duration_s)
                and not self.gone_from_this_host())

    def describe(self, now: datetime) -> str:
        if self.renewed is None:
            return "no lease (installed by hand, or by a peerlab without leases)"
        age = (now - self.renewed).total_seconds()
        gone = ": no such process on this host" if self.gone_from_this_host() else ""
        return f"lease held by {self.holder}{gone}, renewed {age:.0f} s ago (lapses after {self.duration_s} s)"


def owners(api_client: Any, namespace: str, releases: list[str]) -> list[Owner]:
    """Each peerlab release of the namespace (`releases`, as helm lists them: list them before calling
    this, since a run creates its lease before its release) with its lease, and the leases whose release
    is gone."""
    from kubernetes import client

    found = {r: Owner(r, True) for r in releases if RELEASE.match(r)}
    leases = client.CoordinationV1Api(api_client).list_namespaced_lease(namespace, label_selector=LABEL,
                                                                        _request_timeout=30)
    for lease in leases.items:
        name = lease.metadata.name
        if not RELEASE.match(name):
            continue
        owner = found.setdefault(name, Owner(name, False))
        spec = lease.spec
        owner.holder, owner.renewed = spec.holder_identity, spec.renew_time or spec.acquire_time
        owner.duration_s = spec.lease_duration_seconds or LEASE_S
    return [found[r] for r in sorted(found)]


def delete_lease(api_client: Any, namespace: str, release: str) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.CoordinationV1Api(api_client).delete_namespaced_lease(release, namespace, _request_timeout=30)
    except ApiException as err:
        if err.status != 404:
            raise
