"""Every host op's self time in TensorFlow profiler XSpace files, read by xprof (its
`framework_op_stats` tool), printed as one JSON list of [op type, op name, self seconds]:

    python -m tf_impl.xspace_ops FILE.xplane.pb [...]

A process of its own, which imports xprof and not TensorFlow: xprof's native library carries its
own copies of the libraries TensorFlow links (absl, protobuf, the profiler's), which a training
process should not load twice. `tf_impl.step_profile` runs it.
"""

from __future__ import annotations

import json
import sys


def op_times(paths: list[str]) -> list[list[object]]:
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data(paths, "framework_op_stats", {})
    table = json.loads(data)[0]  # the first table: every op; the second leaves IDLE out
    columns = [column["id"] for column in table["cols"]]
    found: list[list[object]] = []
    for row in table["rows"]:
        cells = {name: (cell or {}).get("v") for name, cell in zip(columns, row["c"], strict=True)}
        if cells["host_or_device"] == "Host" and cells["type"] != "IDLE":
            self_us = float(cells["total_self_time"] or 0.0)
            found.append([str(cells["type"]), str(cells["operation"]), self_us / 1e6])
    return found


if __name__ == "__main__":
    print(json.dumps(op_times(sys.argv[1:])))
