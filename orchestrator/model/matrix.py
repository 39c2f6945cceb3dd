"""One scenario over a list of variants: the cartesian product of the scenario's `matrix:` block and
the `--matrix PATH=V1,V2,...` options, each combination applied as `--set` overrides on top of the
user's own (a --set of a matrix path pins it to that one value). `peerlab run` runs the combinations one after another and prints one comparison table.
The combinations are counted before any is built or a value of --matrix parsed: more than
limits.MAX_COMBINATIONS are refused, naming the limit.
"""
from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.model import bounded, limits
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
    return {path: [yaml_value(v, path, "--matrix") for v in values] for path, values in _split_args(items).items()}


def _split_args(items: list[str]) -> dict[str, list[str]]:
    """`--matrix` options as path -> its values' text (not parsed yet)."""
    out: dict[str, list[str]] = {}
    for item in items:
        path, sep, raw = item.partition("=")
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not sep or not path or not values:
            raise ScenarioError("--matrix", [f"'{bounded.shown(item)}': write it as dotted.path=value1,value2,..."])
        out[path] = values
    return out


def expand(path: str | Path, overrides: list[str] = (), matrix_args: list[str] = (),
           data_roots: list[str | Path] = ()) -> list[Combination]:
    """Every combination of the scenario at `path`, validated (the first invalid one raises, naming it);
    `data_roots`: directories outside the scenario's own whose data files it may read."""
    source = str(path)
    access = DataAccess.for_scenario(path, data_roots)
    data = read_data(read_file(path), source)
    matrix = data.pop("matrix", None) or {}
    if not isinstance(matrix, dict) or not all(isinstance(k, str) and isinstance(v, list) and v
                                               for k, v in matrix.items()):
        raise ScenarioError(source, ["matrix: expected {dotted.path: [value, ...]} with at least one value each"])
    pinned = {canonical_path(o.partition("=")[0]) for o in overrides}
    sizes = {k: len(v) for k, v in {**matrix, **_split_args(list(matrix_args))}.items() if canonical_path(k) not in pinned}
    try:
        limits.check_matrix(sizes, lambda: bounded.count_values(data, limits.MAX_MATRIX_WORK))
    except ValueError as err:
        raise ScenarioError(source, [str(err)]) from None
    matrix = {**matrix, **parse_matrix_args(list(matrix_args))}
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
