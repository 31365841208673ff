"""The projection: a run priced at other worker counts, one feature in one package.

- `link_profile`: the link profile (each collective's measured time by wire bytes, per group
  and per tier) and how it prices a call;
- `link_bench`: the driver of the link tool, shared by `torch_impl.links` and `tf_impl.links`;
- `step_model`: one recorded run's step at N workers (compute, collectives, the rest);
- `reasons`: a step in its measured parts, and a sharded step against a replicated one;
- `memory_at_n`: memory per rank at N against a device (`--device-memory`);
- `profiles`: which link profiles price the runs (`--links`, the results', torch's NCCL model);
- `summary`: `compare.py --project`, the table, the crossings and the caveats;
- `chart`: its plot.

What needs a framework stays with it: torch's NCCL estimator (`torch_impl.nccl_model`), memory
tracker (`torch_impl.memory_plan`, `torch_impl.memory_check`) and step profiler
(`torch_impl.step_profile`). Nothing here imports torch or TensorFlow.
"""
