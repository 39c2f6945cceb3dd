"""The Helm chart's values.schema.json lists the protocols the node image runs and the adapters whose
images can run a node group; this writes both lists from their registries (`make chart-schema`, after
adding a protocol or an adapter). A test keeps them equal."""
from __future__ import annotations

import json

from node.adapters import ADAPTERS
from node.paths import ROOT
from node.protocols import PROTOCOLS

SCHEMA = ROOT / "charts" / "peerlab" / "values.schema.json"


def enums(schema: dict) -> list[tuple[dict, list[str]]]:
    """Each registry's enum in the schema, with the list it must hold."""
    return [(schema["properties"]["protocol"], sorted(PROTOCOLS)),
            (schema["properties"]["adapters"]["items"]["properties"]["implementation"], sorted(ADAPTERS))]


def write() -> bool:
    """Rewrite the enums; True if one changed."""
    schema = json.loads(SCHEMA.read_text())
    changed = False
    for where, wanted in enums(schema):
        if where["enum"] != wanted:
            where["enum"] = wanted
            changed = True
    if changed:
        SCHEMA.write_text(json.dumps(schema, indent=2) + "\n")
    return changed


if __name__ == "__main__":
    print(f"{SCHEMA.relative_to(ROOT)}: {'updated' if write() else 'already lists every protocol and adapter'}")
