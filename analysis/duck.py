"""The core metrics of analysis.metrics.core_metrics, in DuckDB SQL over the same Parquet tables.

Not a second analysis path: reports come from Spark. This is the single-machine yardstick that
`peerlab bench analysis` times Spark against, and it checks that both engines agree.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.metrics import COVERAGE_POINTS


def core_metrics(con: Any, events_dir: Path, subs: list[tuple[str, str]], nodes: int) -> dict[str, Any]:
    con.execute("CREATE OR REPLACE TEMP TABLE subs(node VARCHAR, topic VARCHAR)")
    con.executemany("INSERT INTO subs VALUES (?, ?)", subs)
    con.execute(f"""CREATE OR REPLACE TEMP VIEW ev AS SELECT * FROM
                    read_parquet('{events_dir}/**/*.parquet', hive_partitioning = true)""")
    con.execute("""CREATE OR REPLACE TEMP TABLE pubs AS
        SELECT msg_id, any_value(topic) AS topic, any_value(node) AS origin, min(ts) AS t_pub
        FROM ev WHERE type = 'publish_message' GROUP BY msg_id""")
    con.execute("""CREATE OR REPLACE TEMP TABLE dl AS
        WITH expected AS (SELECT p.msg_id, s.node AS receiver, p.t_pub FROM pubs p JOIN subs s USING (topic)
                          WHERE s.node <> p.origin),
             got AS (SELECT msg_id, node AS receiver, min(ts) AS t_recv FROM ev
                     WHERE type = 'deliver_message' GROUP BY msg_id, node)
        SELECT e.*, g.t_recv, (g.t_recv - e.t_pub) / 1e6 AS latency_ms
        FROM expected e LEFT JOIN got g USING (msg_id, receiver)""")
    delivered, expected = con.execute("SELECT count(t_recv), count(*) FROM dl").fetchone()
    quantiles, mean, mx, mn, n = con.execute(
        """SELECT quantile_cont(latency_ms, [0.5, 0.9, 0.99]), avg(latency_ms), max(latency_ms),
                  min(latency_ms), count(latency_ms) FROM dl""").fetchone()
    p50, p90, p99 = quantiles if n else (None, None, None)
    ranks = ", ".join(
        f"CASE WHEN len(lat) >= (expected * {x} + 99) // 100 THEN lat[(expected * {x} + 99) // 100] END AS L{x}"
        for x in COVERAGE_POINTS)
    cov_aggs = ", ".join(f"avg(L{x}), stddev_samp(L{x}), count(L{x})" for x in COVERAGE_POINTS)
    cov = con.execute(f"""WITH per_msg AS (
            SELECT msg_id, count(*) AS expected, list_sort(list(latency_ms) FILTER (WHERE latency_ms IS NOT NULL)) AS lat
            FROM dl GROUP BY msg_id)
        SELECT {cov_aggs} FROM (SELECT {ranks} FROM per_msg)""").fetchone()
    coverage: dict[str, Any] = {}
    for i, x in enumerate(COVERAGE_POINTS):
        coverage[f"L{x}"] = cov[3 * i]
    coverage["deviation"] = {f"L{x}": cov[3 * i + 1] for i, x in enumerate(COVERAGE_POINTS)}
    coverage["messages_reaching"] = {f"L{x}": cov[3 * i + 2] for i, x in enumerate(COVERAGE_POINTS)}
    dups, total, data = con.execute(
        """SELECT count(*) FILTER (WHERE type = 'duplicate_message'),
                  coalesce(sum(bytes) FILTER (WHERE type = 'send_rpc'), 0),
                  coalesce(sum(data_bytes) FILTER (WHERE type = 'send_rpc'), 0) FROM ev""").fetchone()
    return {"messages": con.execute("SELECT count(*) FROM pubs").fetchone()[0],
            "delivery_ratio": delivered / expected if expected else None,
            "latency_ms": {"p50": p50, "p90": p90, "p99": p99, "mean": mean, "max": mx, "min": mn, "count": n},
            "coverage_latency_ms": coverage, "duplicates_per_node": dups / nodes if nodes else None,
            "bytes": {"data_sent": int(data), "control_sent": int(total - data), "total_sent": int(total)}}
