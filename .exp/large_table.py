import json, sys
from pathlib import Path
OLD = {  # docs/protocols/gossipsub.md, 2026-11-21: L100, data MB, duplicates per node
 ("v1.1", 200000): (742, 1069, 95.1), ("v1.2", 200000): (759, 907, 78.9), ("stagger-seq", 200000): (1138, 412, 29.4),
 ("stagger-3", 200000): (768, 690, 57.2), ("fragment-4", 200000): (770, 850, 292.6), ("all-3", 200000): (756, 654, 214.1),
 ("v1.1", 1000000): (3996, 5694, 102.1), ("v1.2", 1000000): (3623, 3688, 62.0), ("stagger-seq", 1000000): (2360, 2515, 38.5),
 ("stagger-3", 1000000): (3251, 3409, 56.4), ("fragment-4", 1000000): (2361, 4379, 303.2), ("all-3", 1000000): (1802, 3611, 241.8)}
ORDER = ["v1.1", "v1.2", "stagger-seq", "stagger-3", "fragment-4", "all-3"]
rows = {}
for d in sorted(Path(sys.argv[1] if len(sys.argv) > 1 else "runs").glob("*gossipsub-large-*")):
    m = json.loads((d / "analysis/metrics.json").read_text())
    sc = json.loads((d / "manifest.json").read_text())["scenario"]
    key = (sc["protocol"]["params"]["variant"], sc["workload"]["message_size"])
    rows[key] = (d.name, m)
for size in (200000, 1000000):
    v12 = rows[("v1.2", size)][1]
    for v in ORDER:
        name, m = rows[(v, size)]
        p = m["protocol"]; L = p["coverage_latency_ms"]
        b = p["bytes_sent_by_type"]; total = sum(b.values()); data = b["data"]; control = total - data
        d12 = v12["protocol"]["bytes_sent_by_type"]["data"]
        l12 = v12["protocol"]["coverage_latency_ms"]["L100"]
        old = OLD[(v, size)]
        print(f"| {v}, {size // 1000 if size < 1e6 else 1} {'KB' if size < 1e6 else 'MB'} | {m['delivery_ratio']:g} | "
              f"{L['L50']:.0f} / {L['L90']:.0f} / {L['L100']:.0f} ± {L['deviation']['L100']:.0f} ms (was {old[0]}) | "
              f"{100 * (L['L100'] / l12 - 1):+.0f}% | {data / 1e6:.0f} MB (was {old[1]}) | {100 * (data / d12 - 1):+.0f}% | "
              f"{control / 1e6:.2f} MB, {100 * control / total:.2f}% | {p['duplicates']['count'] / m['nodes']:.1f} (was {old[2]}) | "
              f"{p['idontwant_saves']['count']} | {p['control']['iwant']} | {m['mesh']['mean_at_delivery']:.2f} |   <!-- {name} -->")
