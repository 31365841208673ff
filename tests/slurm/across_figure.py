"""The across-nodes figure of docs/communication.md, from what
tests/slurm/test_projection_across_nodes.py kept (SUITE_SHAPED_OUT=FOLDER):

    SUITE_SHAPED_OUT=/tmp/across make test-scaling
    python tests/slurm/across_figure.py /tmp/across/across.jsonl docs/across_nodes.png

One panel a strategy: samples/s measured on 2 and 4 nodes (links shaped to 25 Mbit/s), and the
projection of the 2-node run to 4 nodes with the 2-node link profile (its range: no overlap of
communication with compute to full overlap). Several runs of the test give several points.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend


def main(source: str, target: str) -> None:
    rows = [json.loads(line) for line in Path(source).read_text().splitlines()]
    cases = list(dict.fromkeys(row["case"] for row in rows))
    figure, axes = plt.subplots(1, len(cases), figsize=(3.6 * len(cases), 3.8), sharey=True)
    for axis, case in zip(axes, cases, strict=True):
        mine = [row for row in rows if row["case"] == case]
        for index, row in enumerate(mine):
            first = index == 0
            axis.plot(
                [2, 4],
                [row["measured_2"], row["measured_4"]],
                "o-",
                color="#1f77b4",
                label="measured" if first else None,
            )
            low, high = row["projected_4_low"], row["projected_4_high"]
            axis.errorbar(
                [4.12],
                [(low + high) / 2],
                yerr=[[(high - low) / 2], [(high - low) / 2]],
                fmt="s",
                color="#d62728",
                capsize=4,
                label="projected from 2 nodes" if first else None,
            )
        errors = ", ".join(f"{row['error']:+.0%}" for row in mine)
        axis.set_title(f"{case}: measured vs projected {errors}", fontsize=9)
        axis.set_xticks([2, 4])
        axis.set_xlabel("nodes (1 rank each)")
        axis.set_ylim(bottom=0)
    axes[0].set_ylabel("samples/s (global batch 64)")
    axes[0].legend(fontsize=8, loc="lower left")
    figure.text(
        0.005,
        0.01,
        "MLP, SLURM test cluster (slurm/testcluster.py), tc tbf 25mbit both ways on every node, "
        "4 nodes sharing 2 cores; tests/slurm/test_projection_across_nodes.py",
        fontsize=7,
        color="#555555",
    )
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    figure.savefig(target, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
