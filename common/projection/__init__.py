"""The projection: a run priced at other worker counts, one feature in one package.

`link_profile` (each collective's measured time by wire bytes, and how it prices a call),
`link_bench` (the link tool's driver), `step_model` (a run's step at N), `reasons` (a step in
its measured parts), `memory_at_n` (memory per rank at N), `levers` and `lever_speed` (what to
change when it does not fit), `profiles` (which link profiles price the runs), `summary`
(`compare.py --project`) and `chart` (its plot). What needs a framework stays with it
(`torch_impl.nccl_model`, `torch_impl.memory_plan`, `torch_impl.step_profile`); nothing here
imports torch or TensorFlow.
"""
