"""The framework sections of the config (`torch`, `tf`): knobs that exist in one framework
only, kept apart from the shared sections (`common.core.config.config`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, field_validator
from pydantic import StrictStr as Text

from common.checks.section import Section
from common.core.config import strategies


class TorchConfig(Section):
    strategy: Text = strategies.AUTO
    """auto: single for one process, ddp for more; or one of `common.core.config.strategies`: single
    (one process, no wrapper: the baseline), ddp, fsdp2 (fully_shard), fsdp1 (FSDP), hsdp
    (fully_shard on a replicate x shard mesh)."""
    sharding: Literal["full_shard", "shard_grad_op", "no_shard"] = "full_shard"
    """FSDP sharding: fsdp2 and hsdp map full_shard/shard_grad_op to reshard_after_forward=
    True/False."""
    hsdp_shard_size: Annotated[StrictInt, Field(ge=0)] = 0
    """hsdp: ranks per shard group (the parameters are sharded within a group and replicated
    across groups); 0: the ranks of one node."""
    wrap: Literal["layer", "size"] = "layer"
    """FSDP units, the same for fsdp2 and fsdp1 (`torch_impl.parallel.wrap_units`). layer:
    every conv/dense layer is a unit, so at most one layer is ever gathered whole and the peak
    stays one layer above the shards whatever the model's size (FSDP2's documented pattern,
    one fully_shard per block); size: a layer becomes a unit when it holds at least
    auto_wrap_min_params parameters and the rest stay with the root (FSDP1's size policy),
    fewer and larger collectives, faster on small models."""
    auto_wrap_min_params: Annotated[StrictInt, Field(ge=1)] = 100_000
    """torch.wrap=size: the parameter count from which a layer is a unit of its own."""
    mixed_precision: Literal["none", "bf16", "fp16"] = "none"
    """Compute dtype on every strategy (autocast for single/ddp, FSDP's mixed-precision policy);
    parameters, optimizer state and gradient reductions stay fp32; fp16 adds loss scaling.
    fp16 on the CPU runs, slowly: use bf16 there."""
    compile: StrictBool = False
    """torch.compile the model (inductor; `nn.Module.compile`, which keeps parameter names):
    single, ddp (DDPOptimizer splits graphs at buckets) and fsdp2. The first steps and the
    first evaluation compile; compare reports that time apart."""
    optimizer_impl: Literal["auto", "fused", "foreach", "default"] = "auto"
    """The optimizer's update kernels: auto (foreach: one kernel per operation over all
    parameters), fused (Adam, SGD; DDP and fsdp2 then differ in the last bits), or default
    (torch's own choice, no flag: for-loop on the CPU). `torch_impl.optim.implementation`
    decides; numerics records it."""
    cpu_offload: StrictBool = False
    """Keep FSDP parameter shards (and optimizer state) in host memory."""
    pin_memory: StrictBool = True
    """Pinned host buffers (loader pipeline, CPU offload); needs CUDA."""

    @field_validator("strategy")
    @classmethod
    def _registered(cls, name: str) -> Any:
        """A name of the registry (its error names them all), or auto."""
        if name != strategies.AUTO:
            strategies.get("torch", name)
        return name


class TfConfig(Section):
    strategy: Text = "mwms"
    """One of `common.core.config.strategies` for TensorFlow: mwms (MultiWorkerMirroredStrategy)."""
    communication: Literal["auto", "ring", "nccl"] = "auto"
    """CollectiveCommunication of MultiWorkerMirroredStrategy (nccl needs GPUs)."""
    mixed_precision: Literal["none", "bf16", "fp16"] = "none"
    """Keras mixed-precision policy: mixed_bfloat16 / mixed_float16 (fp32 variables, loss
    scaling under fp16), the same arithmetic as torch.mixed_precision."""
    jit_compile: StrictBool = False
    """XLA-compile the forward and backward pass of every worker and the evaluation step
    (tf.function(jit_compile=True)); the gradient all-reduce and the optimizer update stay
    outside, where MultiWorkerMirroredStrategy's collectives run."""

    @field_validator("strategy")
    @classmethod
    def _registered(cls, name: str) -> Any:
        """A name of the registry (its error names them all)."""
        strategies.get("tf", name)
        return name
