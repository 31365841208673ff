"""The shaped-link figure of docs/communication.md, from what tests/slurm/test_shaped_links.py
kept (SUITE_SHAPED_OUT=FOLDER):

    SUITE_SHAPED_NODES=2,4 SUITE_SHAPED_OUT=/tmp/shaped pytest tests/slurm/test_shaped_links.py
    python tests/slurm/shaped_figure.py /tmp/shaped/shaped.jsonl docs/shaped_links.png

Left: bytes per step and node, counted on the veths against the accounting. Right: the step
time that shaping the links to 100 Mbit/s added, measured against projected.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend


def main(source: str, target: str) -> None:
    rows = [json.loads(line) for line in Path(source).read_text().splitlines()]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    sent = [r for r in rows if r["what"] == "bytes" and r["link"] == "100mbit"]
    labels = [f"{r['case']} x{r['nodes']}" for r in sent]
    xs = range(len(sent))
    left.bar([x - 0.2 for x in xs], [r["veth"] / 1e3 for r in sent], 0.4, label="veth counters")
    left.bar(
        [x + 0.2 for x in xs],
        [r["accounting"] / 1e3 for r in sent],
        0.4,
        label="accounting (records)",
    )
    left.set_xticks(list(xs), labels, rotation=30, ha="right", fontsize=8)
    left.set_ylabel("kB sent per node per training step")
    left.set_title("Bytes on the wire: counted vs accounted", fontsize=10)
    left.legend(fontsize=8)
    timed = [r for r in rows if r["what"] == "time"]
    labels = [f"{r['case']} x{r['nodes']}" for r in timed]
    xs = range(len(timed))
    right.bar([x - 0.2 for x in xs], [1e3 * r["added_s"] for r in timed], 0.4, label="measured")
    right.bar(
        [x + 0.2 for x in xs],
        [1e3 * r["projected_s"] for r in timed],
        0.4,
        label="projected (link profiles)",
    )
    right.set_xticks(list(xs), labels, rotation=30, ha="right", fontsize=8)
    right.set_ylabel("ms added per step by 100 Mbit/s links")
    right.set_title("Step time shaping adds: measured vs projected", fontsize=10)
    right.legend(fontsize=8)
    figure.text(
        0.005,
        0.01,
        "MLP, SLURM test cluster (slurm/testcluster.py), tc tbf 100mbit "
        "both ways on every node; tests/slurm/test_shaped_links.py",
        fontsize=7,
        color="#555555",
    )
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    figure.savefig(target, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
