"""The local backend's one netlink handle in the switch's namespace (orchestrator/backends/local.py):
opened once and reused, kept through an operation the kernel refuses, unusable once closed, and closed
before its namespace goes."""
import os

import pytest
from pyroute2 import NetlinkError, netns

from orchestrator.shaping.namespace_access import NamespaceHandle

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
