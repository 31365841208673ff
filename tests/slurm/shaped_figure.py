"""The shaped-link figure of docs/communication.md, from what tests/slurm/test_shaped_links.py
kept (SUITE_SHAPED_OUT=FOLDER):

    SUITE_SHAPED_NODES=2,4 SUITE_SHAPED_OUT=/tmp/shaped pytest tests/slurm/test_shaped_links.py
    python tests/slurm/shaped_figure.py /tmp/shaped/shaped.jsonl docs/shaped_links.png

Left: bytes per step and node, counted on the veths against the accounting. Right: the step
time that shaping the links to 100 Mbit/s added, measured against projected (hsdp's at 25
Mbit/s, its label says so: test_shaped_links.HSDP_RATE).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend


def _at(link: str | None) -> str:
    """A row's link when it is not the figure's 100mbit (hsdp's time, HSDP_RATE)."""
    return f" at {link}" if link and link != "100mbit" else ""


def pairs(axis, rows: list[dict], bars: dict[str, list[float]], ylabel: str, title: str) -> None:
    """Two bars a row (`bars`: legend label -> one value a row), labelled by case and nodes."""
    xs = range(len(rows))
    for offset, (label, values) in zip((-0.2, 0.2), bars.items(), strict=True):
        axis.bar([x + offset for x in xs], values, 0.4, label=label)
    labels = [f"{r['case']} x{r['nodes']}{_at(r.get('link'))}" for r in rows]
    axis.set_xticks(list(xs), labels, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(ylabel)
    axis.set_title(title, fontsize=10)
    axis.legend(fontsize=8)


def main(source: str, target: str) -> None:
    rows = [json.loads(line) for line in Path(source).read_text().splitlines()]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    sent = [r for r in rows if r["what"] == "bytes" and r["link"] == "100mbit"]
    bars = {
        "veth counters": [r["veth"] / 1e3 for r in sent],
        "accounting (records)": [r["accounting"] / 1e3 for r in sent],
    }
    pairs(
        left,
        sent,
        bars,
        "kB sent per node per training step",
        "Bytes on the wire: counted vs accounted",
    )
    timed = [r for r in rows if r["what"] == "time"]
    bars = {
        "measured": [1e3 * r["added_s"] for r in timed],
        "projected (link profiles)": [1e3 * r["projected_s"] for r in timed],
    }
    pairs(
        right,
        timed,
        bars,
        "ms added per step by 100 Mbit/s links",
        "Step time shaping adds: measured vs projected",
    )
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
