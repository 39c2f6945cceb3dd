"""Protocol-specific analysis, registered by protocol name.

A protocol that logs more than the common events (control messages, saves, epochs...) registers an
`Extra` here: a function adding its own section to metrics.json (under "protocol") and tables, plus
the columns `peerlab compare` shows for it. `analysis.job` looks the run's protocol up in `EXTRAS`;
no protocol name appears anywhere else in analysis/.
"""
from analysis.extras import dht, gossipsub, overlay_epochs  # noqa: F401  (they register themselves)
from analysis.extras.registration import EXTRAS, Extra, ExtraResult, RunFrames, register, warmup_messages

__all__ = ["EXTRAS", "Extra", "ExtraResult", "RunFrames", "register", "warmup_messages"]
