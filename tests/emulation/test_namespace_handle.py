"""The local backend's netlink handles (orchestrator/shaping/namespace_access.py, `InProcess`): one per
namespace, opened once and reused, kept through an operation the kernel refuses, unusable once closed,
and closed before their namespaces go; once the access is closed, no call opens one again."""
import os

import pytest
from pyroute2 import NetlinkError, netns

from orchestrator.shaping import ops
from orchestrator.shaping.namespace_access import InProcess, NamespaceHandle

pytestmark = pytest.mark.emulation


@pytest.fixture
def namespace():
    name = f"nhtest{os.getpid()}"  # (not "pl...": the leftover checks of runs beside it look for those)
    netns.create(name)
    yield name
    netns.remove(name)


def test_one_handle_serves_every_call_until_closed(namespace):
    ns = NamespaceHandle(namespace)
    handle, links = ns.call(lambda h: (h, [link.get_attr("IFLA_IFNAME") for link in h.get_links()]))
    assert links == ["lo"]
    with pytest.raises(NetlinkError):  # the kernel refuses: no such device
        ns.call(lambda h: h.link("set", index=999999, state="up"))
    assert ns.call(lambda h: h) is handle  # the same handle still: no new fork into the namespace
    ns.close()
    with pytest.raises(RuntimeError):
        ns.call(lambda h: h)
    ns.close()  # a second teardown finds it closed


def test_a_broken_handle_is_replaced_by_the_next_call(namespace):
    ns = NamespaceHandle(namespace)
    before = ns.call(lambda h: h)

    def broken(handle):
        raise OSError("the socket broke")
    with pytest.raises(OSError):
        ns.call(broken)
    after = ns.call(lambda h: h)
    assert after is not before and len(ns.call(lambda h: h.get_links())) == 1
    ns.close()


def test_the_runs_access_keeps_a_handle_per_namespace_and_opens_none_once_closed(namespace):
    access = InProcess()
    handle = access.handle(namespace)
    assert access.handle(namespace) is handle
    (described,) = access.run(namespace, [ops.Describe("lo")])
    assert described["op"] == "describe" and access.handle(namespace) is handle  # the same, not a new one
    access.close()
    with pytest.raises(RuntimeError):  # its handles closed
        handle.call(lambda h: h)
    # a call still in flight at teardown (a counters' sample) must not open the namespace again
    with pytest.raises(RuntimeError, match="being removed"):
        access.run(namespace, [ops.Describe("lo")])
    access.close()  # a second teardown finds it closed
