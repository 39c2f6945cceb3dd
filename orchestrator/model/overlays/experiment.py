"""The seed's experiments: build overlays on R random workloads and report mean and 95% confidence
interval (1.96 x sample standard deviation / sqrt(R), as the seed's tables do)."""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.model.overlays import build, members_of, overlay_metrics, uniform_interest, zipf_interest

Z95 = 1.959963984540054  # inverse standard normal CDF at 0.975


@dataclass
class Workload:
    nodes: int
    topics: int
    subscriptions: int | None = 10  # Zipf model: topics per node
    zipf: float = 0.5
    interest: float | None = None   # uniform model instead: probability per topic

    def draw(self, rng: random.Random) -> list[set[int]]:
        if self.interest is not None:
            return uniform_interest(self.nodes, self.topics, self.interest, rng)
        return zipf_interest(self.nodes, self.topics, self.zipf, self.subscriptions, rng)


def mean_ci(values: list[float]) -> dict[str, float]:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < len(values):
        return {"mean": math.inf, "ci95": math.nan}
    mean = statistics.fmean(values)
    ci = Z95 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return {"mean": mean, "ci95": ci}


def run_experiment(algorithms: list[str], wl: Workload, runs: int, seed: int, degree: int = 8,
                   diameter: bool = False, progress=None) -> dict[str, dict[str, dict[str, float]]]:
    """Every algorithm sees the same R workloads (run r uses seed + r)."""
    samples: dict[str, dict[str, list[float]]] = {a: {} for a in algorithms}
    for r in range(runs):
        subs = wl.draw(random.Random(f"peerlab-overlay:{seed + r}"))
        members = members_of(subs, wl.topics)
        bound = max((len(m) for m in members), default=1) - 1
        for alg in algorithms:
            started = time.perf_counter()
            ov = build(alg, subs, wl.topics, random.Random(f"peerlab-overlay:{seed + r}:{alg}"), degree)
            seconds = time.perf_counter() - started
            metrics = overlay_metrics(ov, members, diameter=diameter)
            metrics["seconds"] = seconds
            metrics["star_bound"] = float(bound)
            for key, value in metrics.items():
                samples[alg].setdefault(key, []).append(value)
            if progress:
                progress(f"run {r + 1}/{runs} {alg}: {seconds:.2f}s")
    return {alg: {k: mean_ci(v) for k, v in metrics.items()} for alg, metrics in samples.items()}


def format_table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    keys = ["avg_degree", "max_degree", "edges", "connected_topics", "seconds"]
    if any("max_topic_diameter" in m for m in results.values()):
        keys.insert(4, "max_topic_diameter")
    head = f"{'algorithm':<12}" + "".join(f"{k:>22}" for k in keys)
    lines = [head]
    for alg, m in results.items():
        cells = "".join(f"{m[k]['mean']:>13.3f} ±{m[k]['ci95']:<7.3f}" for k in keys)
        lines.append(f"{alg:<12}{cells}")
    bound = next(iter(results.values()))["star_bound"]["mean"]
    lines.append(f"(a star per topic cannot have a maximum degree below the largest topic's subscribers - 1: "
                 f"{bound:.1f} on average here)")
    return "\n".join(lines)


def to_json(results: dict[str, dict[str, dict[str, float]]]) -> dict[str, Any]:
    return {alg: {k: {kk: (None if isinstance(vv, float) and not math.isfinite(vv) else vv)
                      for kk, vv in v.items()} for k, v in m.items()} for alg, m in results.items()}
