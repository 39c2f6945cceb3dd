"""`peerlab prepare`: the Ansible playbooks in playbooks/, run through ansible-runner on this machine.

    host      traffic-control modules, sysctls and limits for many nodes, a Docker engine
    kind      a multi-node kind cluster with the node image loaded (for --backend kubernetes)
    storage   an S3 bucket for run logs (and optionally a self-hosted store in a container)

`--check` is Ansible's check mode: it reports what would change and changes nothing.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from node.paths import ROOT

PLAYBOOKS = {p.stem: p for p in sorted((ROOT / "playbooks").glob("*.yml"))}


def prepare(name: str, *, check: bool = False, extravars: dict[str, Any] | None = None,
            quiet: bool = False) -> tuple[int, dict[str, Any]]:
    """Run playbook `name` against localhost; (return code, per-host stats)."""
    import ansible_runner

    if name not in PLAYBOOKS:
        raise ValueError(f"no playbook {name!r}; available: {', '.join(PLAYBOOKS)}")
    # ansible-playbook lives beside this interpreter (the venv), which may not be on PATH
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0"}
    with tempfile.TemporaryDirectory(prefix="peerlab-ansible-") as private:
        inventory = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        result = ansible_runner.run(
            private_data_dir=private, playbook=str(PLAYBOOKS[name]), inventory=inventory,
            extravars=extravars or {}, cmdline="--check --diff" if check else None, envvars=env,
            quiet=quiet, suppress_env_files=True)
        return result.rc, result.stats or {}
