"""One scenario over a list of variants: the cartesian product of the scenario's `matrix:` block and
the `--matrix PATH=V1,V2,...` options, each combination applied as `--set` overrides on top of the
user's own (a --set of a matrix path pins it to that one value). `peerlab run` runs the combinations one after another and prints one comparison table.
"""
from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.model.data_files import DataAccess
from orchestrator.model.scenario import (
    Scenario,
    ScenarioError,
    canonical_path,
    read_data,
    read_file,
    validate_data,
    yaml_value,
)


@dataclass
class Combination:
    label: str               # "variant=v1.2 workload.message_size=1MB"; "" for a plain scenario
    overrides: list[str]     # the --set strings it adds
    scenario: Scenario


def parse_matrix_args(items: list[str]) -> dict[str, list[Any]]:
    """`--matrix gossipsub.variant=v1.1,v1.2` -> {"gossipsub.variant": ["v1.1", "v1.2"]}."""
    out: dict[str, list[Any]] = {}
    for item in items:
        path, sep, raw = item.partition("=")
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not sep or not path or not values:
            raise ScenarioError("--matrix", [f"{item!r}: write it as dotted.path=value1,value2,..."])
        out[path] = [yaml_value(v, path, "--matrix") for v in values]
    return out


def expand(path: str | Path, overrides: list[str] = (), matrix_args: list[str] = (),
           data_roots: list[str | Path] = ()) -> list[Combination]:
    """Every combination of the scenario at `path`, validated (the first invalid one raises, naming it);
    `data_roots`: directories outside the scenario's own whose data files it may read."""
    source = str(path)
    access = DataAccess.for_scenario(path, data_roots)
    data = read_data(read_file(path), source)
    matrix = data.pop("matrix", None) or {}
    if not isinstance(matrix, dict) or not all(isinstance(v, list) and v for v in matrix.values()):
        raise ScenarioError(source, ["matrix: expected {dotted.path: [value, ...]} with at least one value each"])
    matrix = {**matrix, **parse_matrix_args(list(matrix_args))}
    pinned = {canonical_path(o.partition("=")[0]) for o in overrides}
    keys = [k for k in matrix if canonical_path(k) not in pinned]  # --set PATH=V pins a matrix entry
    combos = []
    for values in itertools.product(*(matrix[k] for k in keys)) if keys else [()]:
        sets = [f"{k}={_yaml_scalar(v)}" for k, v in zip(keys, values)]
        label = " ".join(f"{canonical_path(k).removeprefix('protocol.params.')}={_yaml_scalar(v)}"
                         for k, v in zip(keys, values))
        where = f"{source} [{label}]" if label else source
        scenario = validate_data(copy.deepcopy(data), where, [*overrides, *sets], access)
        combos.append(Combination(label, sets, scenario))
    return combos


def _yaml_scalar(value: Any) -> str:
    return value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
