import gzip, json, sys
from pathlib import Path
for d in sys.argv[1:]:
    d = Path(d)
    sc = json.loads((d / "manifest.json").read_text())["scenario"]
    tot = data = dups = 0
    for f in (d / "events").glob("*.jsonl.gz"):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                e = json.loads(line)
                if e["type"] == "send_rpc":
                    tot += e["bytes"]; data += e.get("data_bytes", 0)
                elif e["type"] == "duplicate_message":
                    dups += 1
    print(sc["protocol"]["params"]["variant"], sc["workload"]["message_size"], sc["protocol"]["params"].get("msg_id"),
          f"control {(tot - data) / 1e6:.2f} MB {100 * (tot - data) / tot:.3f}% data {data / 1e6:.0f} MB dups/node {dups / 50:.1f}")
