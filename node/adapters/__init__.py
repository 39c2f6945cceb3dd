"""Node implementations other than peerlab's own: one folder per adapter, each a small program that
speaks the node contract (node/contract.py) for one libp2p implementation, and an `adapter.json`
saying how to launch it, which protocols and parameters it takes, and how it is installed.

    IMPLEMENTATIONS   "peerlab" and every adapter found here
    get_adapter(name) the adapter, or a KeyError listing the known ones; `interop:<adapter>` names the
                      program of an adapter that speaks the gossipsub-interop contract too (node/interop/,
                      run through its shim), `interop:<name>` a user's binary of that contract
    user_adapters()   the user's own programs, registered OUTSIDE any scenario: a folder per program with
                      an adapter.json, in $PEERLAB_ADAPTERS (folders, `:`-separated; `--adapters DIR`
                      on the command line sets it) or else ~/.config/peerlab/adapters
                      (`peerlab contract register NAME BINARY` writes one)

A scenario names implementations only: never a path. Scenarios arrive in pull requests and CI runs
them as root, so a path there would run any program on the machine; what a scenario may run is what
the machine's owner installed or registered.

May import: node.paths, and node.interop.script (inside interop_adapter, for the contract's parameter
names); nothing of orchestrator or analysis. The adapters' programs themselves (go-libp2p/, js-libp2p/,
py-libp2p/, rust-libp2p/) import nothing of peerlab: each runs alone, in its own image.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from node.paths import ROOT

HERE = Path(__file__).resolve().parent
TOOLS = ROOT / ".tools"
PEERLAB = "peerlab"
INTEROP = "interop:"
USER_ADAPTERS_ENV = "PEERLAB_ADAPTERS"
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


def user_dirs() -> list[Path]:
    """Where the user's programs are registered: $PEERLAB_ADAPTERS, else ~/.config/peerlab/adapters."""
    given = os.environ.get(USER_ADAPTERS_ENV)
    if given:
        return [Path(d).expanduser() for d in given.split(":") if d]
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return [config / "peerlab" / "adapters"]


def user_adapters() -> dict[str, dict]:
    """The user's registered programs, name -> its adapter.json (read now: a registration takes effect
    at once). A folder without a readable adapter.json, or one whose name is taken, is left out."""
    found: dict[str, dict] = {}
    for root in user_dirs():
        try:
            folders = sorted(p for p in root.iterdir() if (p / "adapter.json").is_file())
        except OSError:
            continue
        for folder in folders:
            try:
                spec = json.loads((folder / "adapter.json").read_text())
            except (OSError, ValueError):
                continue
            name = spec.get("name") if isinstance(spec, dict) else None
            if isinstance(name, str) and name not in ADAPTERS and name != PEERLAB and name not in found:
                found[name] = {**spec, "directory": str(folder)}
    return found


def register(name: str, binary: Path, root: Path | None = None) -> Path:
    """Register `binary` (a gossipsub-interop program) as `interop:<name>`; returns its adapter.json."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name) or name in ADAPTERS or name == PEERLAB:
        raise ValueError(f"name {name[:64]!r}: letters, digits, '.', '_' and '-', at most 64, and not one of "
                         f"{', '.join(IMPLEMENTATIONS)}")
    binary = binary.expanduser().resolve()
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise ValueError(f"{binary}: not an executable file")
    folder = (root or user_dirs()[0]) / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"name": name, "interop": str(binary),
            "description": f"{binary}, a binary of the gossipsub-interop contract, registered by its user"}
    (folder / "adapter.json").write_text(json.dumps(spec, indent=2) + "\n")
    return folder / "adapter.json"


def interop_adapter(name: str) -> Adapter:
    """`interop:<adapter>` (go-libp2p, rust-libp2p, js-libp2p): that adapter's program in its gossipsub-
    interop mode; `interop:<name>`: a binary its user registered (user_adapters), run by peerlab's shim
    for that contract (`python -m node.interop`). Never a path: KeyError saying how to register one."""
    from node.interop.script import PARAMS

    given = name[len(INTEROP):]
    how = ("register a binary outside the scenario (peerlab contract register NAME ./path/to/binary) and name "
           f"it {INTEROP}NAME, or name an adapter that speaks that contract ({', '.join(interop_adapters())})")
    if given in ADAPTERS:
        binary = ADAPTERS[given].interop_program()
        if binary is None:
            raise KeyError(f"implementation {name[:80]!r}: the {given} adapter does not speak gossipsub-interop's "
                           f"contract; these do: {', '.join(interop_adapters())}")
    elif given in (registered := user_adapters()) and isinstance(registered[given].get("interop"), str):
        binary = Path(registered[given]["interop"])
    elif "/" in given or given.startswith(".") or not given:
        raise KeyError(f"implementation {name[:80]!r}: a scenario names a registered implementation, never a "
                       f"path (a scenario could then run any program on the machine, as root); {how}")
    else:
        raise KeyError(f"implementation {name[:80]!r}: no binary is registered as {given[:64]!r} (in "
                       f"{', '.join(map(str, user_dirs()))}); {how}")
    return Adapter(
        name=name, directory=HERE.parent / "interop",
        description=f"{binary}, a binary of the gossipsub-interop contract (libp2p/test-plans), run through "
                    "peerlab's shim: host name node<ID>, --params params.json, stdout JSON lines",
        protocols=("gossipsub",), params=(*PARAMS, "validation"), wire=INTEROP_WIRE,
        command=(sys.executable, "-m", "node.interop", "--binary", str(binary), "--config", "{config}"),
        needs=(str(binary),), install=f"build it, then: peerlab contract register {given} PATH",
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
        raise KeyError(f"unknown implementation {name[:80]!r}; known: {', '.join(IMPLEMENTATIONS)}, "
                       f"{INTEROP}<adapter> or {INTEROP}<registered name> for a gossipsub-interop binary "
                       "(peerlab contract implementations)") from None
