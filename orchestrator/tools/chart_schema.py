"""The Helm chart's values.schema.json lists the protocols the node image runs; this writes that list
from the protocol registry (`make chart-schema`, after adding a protocol). A test keeps them equal."""
from __future__ import annotations

import json

from node.protocols import PROTOCOLS
from orchestrator.paths import ROOT

SCHEMA = ROOT / "charts" / "peerlab" / "values.schema.json"


def write() -> bool:
    """Rewrite the protocol enum; True if it changed."""
    schema = json.loads(SCHEMA.read_text())
    wanted = sorted(PROTOCOLS)
    if schema["properties"]["protocol"]["enum"] == wanted:
        return False
    schema["properties"]["protocol"]["enum"] = wanted
    SCHEMA.write_text(json.dumps(schema, indent=2) + "\n")
    return True


if __name__ == "__main__":
    print(f"{SCHEMA.relative_to(ROOT)}: {'updated' if write() else 'already lists every protocol'}")
