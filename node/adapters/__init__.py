"""Node implementations other than peerlab's own: one folder per adapter, each a small program that
speaks the node contract (node/contract.py) for one libp2p implementation, and an `adapter.json`
saying how to launch it, which protocols and parameters it takes, and how it is installed.

    IMPLEMENTATIONS   "peerlab" and every adapter found here
    get_adapter(name) the adapter, or a KeyError listing the known ones; `interop:PATH` names a binary
                      of the gossipsub-interop contract (node/interop/), run through its shim, and
                      `interop:<adapter>` the program of an adapter that speaks that contract too
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOOLS = ROOT / ".tools"
PEERLAB = "peerlab"
INTEROP = "interop:"
INTEROP_WIRE = "gossipsub-interop"


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
    interop: str = ""           # its program for gossipsub-interop's contract (with {tools}, {adapter}), if any

    def _fill(self, text: str, config: str = "", tools: str | Path = TOOLS, directory: str | Path | None = None) -> str:
        return text.format(tools=tools, adapter=directory or self.directory, config=config)

    def argv(self, config_path: str, tools: str | Path = TOOLS, directory: str | Path | None = None) -> list[str]:
        """The command that runs a node; `tools` and `directory` where they are inside an image."""
        return [self._fill(part, config_path, tools, directory) for part in self.command]

    def interop_program(self) -> Path | None:
        """The program that takes gossipsub-interop's `--params params.json` (None: this adapter has none)."""
        return Path(self._fill(self.interop)) if self.interop else None

    def missing(self) -> list[str]:
        """Files of the installed adapter that are not there (empty: installed)."""
        return [path for path in (self._fill(p) for p in self.needs) if not Path(path).exists()]


def _load(folder: Path) -> Adapter:
    spec = json.loads((folder / "adapter.json").read_text())
    return Adapter(name=spec["name"], directory=folder, description=spec["description"],
                   protocols=tuple(spec["protocols"]), params=tuple(spec["params"]), wire=spec["wire"],
                   command=tuple(spec["command"]), needs=tuple(spec["needs"]), install=spec["install"],
                   fixed=spec.get("fixed", {}), timers_fixed=spec.get("timers_fixed", {}),
                   interop=spec.get("interop", ""))


ADAPTERS: dict[str, Adapter] = {a.name: a for a in (_load(f) for f in sorted(HERE.iterdir())
                                                     if (f / "adapter.json").exists())}
IMPLEMENTATIONS = (PEERLAB, *ADAPTERS)


def interop_adapter(name: str) -> Adapter:
    """`interop:PATH`: a binary written for gossipsub-interop (PATH absolute, or from the current
    directory), run by peerlab's shim for that contract (`python -m node.interop`); `interop:<adapter>`
    (go-libp2p, rust-libp2p, js-libp2p): that adapter's program in its gossipsub-interop mode."""
    from node.interop.script import PARAMS

    given = name[len(INTEROP):]
    if not given:
        raise KeyError(f"implementation {name!r}: name the binary after {INTEROP} (interop:./my-node), or "
                       f"an adapter that speaks that contract ({', '.join(interop_adapters())})")
    if given in ADAPTERS:
        binary = ADAPTERS[given].interop_program()
        if binary is None:
            raise KeyError(f"implementation {name!r}: the {given} adapter does not speak gossipsub-interop's "
                           f"contract; these do: {', '.join(interop_adapters())}")
    else:
        binary = Path(given).expanduser()
        binary = binary if binary.is_absolute() else Path.cwd() / binary
    return Adapter(
        name=name, directory=HERE.parent / "interop",
        description=f"{binary}, a binary of the gossipsub-interop contract (libp2p/test-plans), run through "
                    "peerlab's shim: host name node<ID>, --params params.json, stdout JSON lines",
        protocols=("gossipsub",), params=(*PARAMS, "validation"), wire=INTEROP_WIRE,
        command=(sys.executable, "-m", "node.interop", "--binary", str(binary), "--config", "{config}"),
        needs=(str(binary),), install=f"build it, or name an existing binary: implementation: {INTEROP}PATH",
        fixed={"msg_id": "first-8-bytes", "sign": False},
        timers_fixed={"in": "a gossipsub-interop binary", "why": "its own (the contract gives it no clock)",
                      "timers": ["heartbeat, TTLs, backoffs and its script's waits"]})


def interop_adapters() -> list[str]:
    """The adapters whose program also speaks gossipsub-interop's contract."""
    return [name for name, adapter in ADAPTERS.items() if adapter.interop]


def get_adapter(name: str) -> Adapter:
    if name.startswith(INTEROP):
        return interop_adapter(name)
    try:
        return ADAPTERS[name]
    except KeyError:
        raise KeyError(f"unknown implementation {name!r}; known: {', '.join(IMPLEMENTATIONS)}, or "
                       f"{INTEROP}PATH for a gossipsub-interop binary") from None
