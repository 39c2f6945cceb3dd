"""The scenario reference page (docs/reference/scenario.md), written from the scenario's JSON Schema
(`peerlab schema`), so the docs list exactly the fields the validator takes. `make docs` writes it;
a test keeps it current."""
from __future__ import annotations

import json
from typing import Any

from node.paths import ROOT
from orchestrator.model.scenario import json_schema

PAGE = ROOT / "docs" / "reference" / "scenario.md"
HEADER = """# Scenario reference

Every field a scenario takes, generated from the JSON Schema that `peerlab schema` prints (the same
models validate scenarios). Durations take units (`100ms`, `2s`), bandwidths `50mbit`, sizes `1KiB`,
rates `4/s`. A walk-through with examples is in [Scenarios](../scenarios.md).
Regenerate with `make docs` after changing a model in `orchestrator/model/`.
"""


def _ref(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref") or next((s.get("$ref") for s in schema.get("allOf", []) if "$ref" in s), None)
    return ref.rsplit("/", 1)[-1] if ref else None


def _type(schema: dict[str, Any]) -> str:
    if name := _ref(schema):
        return f"[{name}](#{name.lower()})"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type(s) for s in schema[key] if s.get("type") != "null")
    kind = schema.get("type", "any")
    if kind == "array" and "items" in schema:
        return f"list of {_type(schema['items'])}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map to {_type(schema['additionalProperties'])}"
    return str(kind)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(schema: dict[str, Any]) -> list[str]:
    props = schema.get("properties", {})
    if not props:
        return ["(no fields)", ""]
    required = set(schema.get("required", []))
    rows = ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, prop in props.items():
        default = "required" if name in required else (
            f"`{json.dumps(prop['default'])}`" if "default" in prop else "")
        rows.append(f"| `{name}` | {_cell(_type(prop))} | {_cell(default)} | {_cell(prop.get('description', ''))} |")
    return rows + [""]


def render() -> str:
    schema = json_schema()
    out = [HEADER, "## Scenario (the top level)", "", *_table(schema)]
    for name, sub in sorted(schema.get("$defs", {}).items(), key=lambda kv: kv[0].lower()):
        out += [f"## {name}", ""]
        if sub.get("description"):
            out += [_cell(sub["description"]), ""]
        out += _table(sub)
    return "\n".join(out).rstrip() + "\n"


def write() -> bool:
    """Write the page; True if it changed."""
    text = render()
    if PAGE.exists() and PAGE.read_text() == text:
        return False
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    return True


if __name__ == "__main__":
    print(f"{PAGE.relative_to(ROOT)}: {'written' if write() else 'already current'}")
