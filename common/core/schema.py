"""The metrics schema of `common.core.metrics`, published as JSON Schema (draft 2020-12) with units,
so that other tools can read the runs: docs/metrics.schema.json.

    python -m common.core.schema > docs/metrics.schema.json

tests/common/test_schema.py keeps the file equal to what this module builds from
`common.core.metrics.SCHEMA`, and validates real runs' records against it with `jsonschema`.
"""

from __future__ import annotations

import json

from common.core.metrics import (
    ADDED,
    CONFIG_SECTIONS,
    MEMORY_ADDED,
    MEMORY_SCHEMA,
    NON_FINITE_ALLOWED,
    SCHEMA,
    SCHEMA_VERSION,
)

JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    dict: "object",
    list: "array",
    type(None): "null",
}

# What each field means, with its unit; a field missing here has no description.
DESCRIPTIONS = {
    "time": "UTC time the record was written, ISO 8601 with milliseconds",
    "schema_version": "version of this schema",
    "run_id": "the run's name, also its folder's name",
    "framework": '"torch" or "tf"',
    "framework_version": "version of torch or tensorflow",
    "versions": "versions of python, numpy and the framework's libraries (CUDA, NCCL, Keras ...)",
    "model": "mlp or cnn",
    "dataset": "mnist, or synthetic (data.name)",
    "model_params": "parameters of the whole model (weights and biases, common.models.weights)",
    "baseline_bytes": "what the rank held before the model was built, in peak_counts' measure",
    "peak_above_baseline_bytes": "peak_bytes less baseline_bytes: what the model, its training "
    "and evaluation added",
    "device_type": "cpu or gpu",
    "seed": "train.seed",
    "strategy": "torch: single, ddp, fsdp2, fsdp1; tf: mwms",
    "precision": "fp32, bf16 or fp16",
    "numerics": "what the precision means here: param_dtype, compute_dtype, grad_reduce_dtype, "
    "optimizer_state_dtype, loss_scaling, tf32 (asked) and tf32_effective (on a GPU), how",
    "threads": "the chief's intra_op and inter_op thread counts (the same rule on both sides: "
    "the rank's share of its cores, common.core.devices)",
    "replicas_in_sync": "every rank holds the same weights after the epoch (integer sums of the "
    "weights' bit patterns equal); null where ranks hold shards (FSDP)",
    "loss_scale": "every rank's fp16 loss scale after the epoch; null without loss scaling",
    "skipped_steps": "every rank's optimizer steps skipped on overflow in the epoch; null "
    "without loss scaling",
    "world_size": "ranks (processes) in the run",
    "global_batch_size": "samples per optimizer step, over all ranks",
    "launcher": "single, local, torchrun or slurm",
    "hosts": "host of every rank, in rank order",
    "devices": "node:device type:device name of every rank, in rank order",
    "config": "the resolved config, every section and key",
    "config_hash": "first 12 hex digits of the SHA-256 of the canonical config JSON",
    "git_commit": "the suite's commit, '-dirty' when changed; null outside git",
    "epoch": "epoch number, from 1",
    "step": "global optimizer step, from 1",
    "loss": "training loss of the step, mean over the global batch (cross-entropy, nats)",
    "lr": "learning rate (of the epoch's last step, in an epoch record)",
    "train_loss": "mean training loss over the epoch's global batches (nats)",
    "val_loss": "mean validation loss over the test set (nats)",
    "val_accuracy": "validation accuracy, a fraction in [0, 1]",
    "steps": "optimizer steps in the epoch",
    "samples": "training samples in the epoch (steps x global batch)",
    "train_time_s": "seconds the train clock read (see train_clock)",
    "train_clock": "what train_time_s covers on this framework",
    "eval_time_s": "seconds of evaluation",
    "samples_per_s": "samples / train_time_s",
    "step_time_p50_s": "median step time, seconds",
    "step_time_p90_s": "90th percentile step time, seconds",
    "elapsed_s": "seconds of the run's epoch loop so far, earlier launches included",
    "first_step_s": "seconds of the epoch's first step; in epoch 1 it holds tracing, compiling "
    "(torch.compile, XLA) and warm-up, which compare reports as its excess over the median step",
    "flops_per_sample": "FLOPs of one training sample, 6 x the forward multiply-accumulates of "
    "the conv and dense layers (common.models.weights.train_flops_per_sample)",
    "peak_flops": "FLOP/s: the sum over ranks of each rank's measured GEMM peak at the run's "
    "precision (common.core.peak, cached per host)",
    "mfu": "model FLOPs utilization: samples_per_s x flops_per_sample / peak_flops",
    "memory": "one entry per rank",
    "checkpoint": "folder of the checkpoint the launch went on from",
    "status": "success, failed or aborted",
    "epochs_completed": "epochs with a record, earlier launches included",
    "total_time_s": "seconds of the run, earlier launches up to their checkpoint included",
    "final_val_accuracy": "val_accuracy of the last epoch, a fraction",
    "best_val_accuracy": "the highest val_accuracy, a fraction",
    "target_accuracy": "train.target_accuracy, a fraction",
    "time_to_target_s": "elapsed_s when val_accuracy first reached target_accuracy; null if never",
    "error": "why the run failed or stopped; null on success",
    "rank": "the rank",
    "peak_bytes": "peak memory of the rank, bytes, as peak_counts says",
    "peak_counts": "what peak_bytes measures",
    "param_bytes": "bytes of parameters the rank holds (a shard under FSDP)",
    "grad_bytes": "bytes of gradients the rank holds",
    "optim_bytes": "bytes of optimizer state the rank holds",
    "reserved_peak_bytes": "peak bytes the GPU caching allocator reserved (torch on CUDA); "
    "null where not measured (CPU, TensorFlow)",
}


def _field(name: str, types: tuple[type, ...]) -> dict:
    names = sorted({JSON_TYPES[t] for t in types})
    if "integer" in names and "number" in names:
        names.remove("integer")
    field: dict = {"type": names[0] if len(names) == 1 else names}
    if name in DESCRIPTIONS:
        field["description"] = DESCRIPTIONS[name]
    if name in NON_FINITE_ALLOWED:
        field["description"] = field.get("description", "") + "; NaN or Infinity if it diverged"
    return field


def _record(kind: str, fields: dict[str, tuple[type, ...]]) -> dict:
    properties = {"record": {"const": kind}}
    properties.update({name: _field(name, types) for name, types in fields.items()})
    added = ADDED.get(kind, {})  # written always since they were added; older files lack them
    properties.update({name: _field(name, types) for name, types in added.items()})
    if kind == "run_start":
        properties["schema_version"] = {"const": SCHEMA_VERSION, **_field("schema_version", (int,))}
        properties["config"]["required"] = list(CONFIG_SECTIONS)
    if kind == "run_end":
        properties["status"]["enum"] = ["success", "failed", "aborted"]
    if kind == "epoch":
        properties["memory"]["items"] = {"$ref": "#/$defs/memory_entry"}
    return {"type": "object", "properties": properties, "required": ["record", *fields]}


def json_schema() -> dict:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"metrics.jsonl record, schema version {SCHEMA_VERSION}",
        "description": "One JSON object per line of a run's metrics.jsonl; the first is "
        "run_start. Times are seconds, memory bytes, accuracies fractions, losses nats.",
        "oneOf": [{"$ref": f"#/$defs/{kind}"} for kind in SCHEMA],
        "$defs": {
            **{kind: _record(kind, fields) for kind, fields in SCHEMA.items()},
            "memory_entry": {
                "type": "object",
                "properties": {
                    name: _field(name, t) for name, t in {**MEMORY_SCHEMA, **MEMORY_ADDED}.items()
                },
                "required": list(MEMORY_SCHEMA),
            },
        },
    }


def text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(text(), end="")
