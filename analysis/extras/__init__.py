"""Protocol-specific analysis, registered by protocol name.

A protocol that logs more than the common events (control messages, saves, epochs...) registers an
`Extra` here: a function adding its own section to metrics.json (under "protocol") and tables, plus
the columns `peerlab compare` shows for it. `analysis.job` looks the run's protocol up in `EXTRAS`;
no protocol name appears anywhere else in analysis/.

May import: analysis's shared modules (metrics, report, traffic), node.protocols (the protocols'
names, the static overlay) and pyspark; never orchestrator/, nor analysis.job, which imports it.
"""
from analysis.extras import dht, gossipsub, overlay_epochs  # noqa: F401  (they register themselves)
from analysis.extras.registration import EXTRAS, Extra, ExtraResult, RunFrames, register, warmup_messages

__all__ = ["EXTRAS", "Extra", "ExtraResult", "RunFrames", "register", "warmup_messages"]
