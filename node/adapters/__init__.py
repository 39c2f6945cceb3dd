"""Node implementations other than peerlab's own: one folder per adapter, each a small program that
speaks the node contract (node/contract.py) for one libp2p implementation, and an `adapter.json`
saying how to launch it, which protocols and parameters it takes, and how it is installed.

    IMPLEMENTATIONS   "peerlab" and every adapter found here
    get_adapter(name) the adapter, or a KeyError listing the known ones
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOOLS = ROOT / ".tools"
PEERLAB = "peerlab"


@dataclass(frozen=True)
class Adapter:
    name: str
    directory: Path
    description: str
    protocols: tuple[str, ...]
    params: tuple[str, ...]     # peerlab parameter names it maps onto the implementation's options
    wire: str                   # nodes of the same wire interoperate in one run
    command: tuple[str, ...]    # with {tools}, {adapter}, {config}
    needs: tuple[str, ...]      # files that exist once it is installed
    install: str                # the command that installs it
    fixed: dict                 # parameters it cannot change, accepted when set to its one value
    timers_fixed: dict          # {"in": where, "timers": [...]}: timers it cannot scale (so no time dilation)

    def _fill(self, text: str, config: str = "", tools: str | Path = TOOLS, directory: str | Path | None = None) -> str:
        return text.format(tools=tools, adapter=directory or self.directory, config=config)

    def argv(self, config_path: str, tools: str | Path = TOOLS, directory: str | Path | None = None) -> list[str]:
        """The command that runs a node; `tools` and `directory` where they are inside an image."""
        return [self._fill(part, config_path, tools, directory) for part in self.command]

    def missing(self) -> list[str]:
        """Files of the installed adapter that are not there (empty: installed)."""
        return [path for path in (self._fill(p) for p in self.needs) if not Path(path).exists()]


def _load(folder: Path) -> Adapter:
    spec = json.loads((folder / "adapter.json").read_text())
    return Adapter(name=spec["name"], directory=folder, description=spec["description"],
                   protocols=tuple(spec["protocols"]), params=tuple(spec["params"]), wire=spec["wire"],
                   command=tuple(spec["command"]), needs=tuple(spec["needs"]), install=spec["install"],
                   fixed=spec.get("fixed", {}), timers_fixed=spec.get("timers_fixed", {}))


ADAPTERS: dict[str, Adapter] = {a.name: a for a in (_load(f) for f in sorted(HERE.iterdir())
                                                     if (f / "adapter.json").exists())}
IMPLEMENTATIONS = (PEERLAB, *ADAPTERS)


def get_adapter(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise KeyError(f"unknown implementation {name!r}; known: {', '.join(IMPLEMENTATIONS)}") from None
