"""torch_impl and tf_impl are mirror images: the same public names and parameters in dist,
memory, checkpoint and gemm (that both fill `common.core.train.contract` is mypy's to check, in make
lint), and the same batches from both sides' data."""

import inspect

import pytest

from common.core.config import config_io
from common.core.config.strategies import ParallelDims
from common.launch import cluster
from tf_impl import checkpoint as tf_checkpoint
from tf_impl import dist as tf_dist
from tf_impl import gemm as tf_gemm
from tf_impl import memory as tf_memory
from torch_impl import checkpoint as torch_checkpoint
from torch_impl import dist as torch_dist
from torch_impl import gemm as torch_gemm
from torch_impl import memory as torch_memory


def public_names(module) -> set[str]:
    """Functions and classes the module defines itself (not those it imports)."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__
    }


@pytest.mark.parametrize(
    "torch_module, tf_module",
    [
        (torch_dist, tf_dist),
        (torch_memory, tf_memory),
        (torch_checkpoint, tf_checkpoint),
        (torch_gemm, tf_gemm),
    ],
    ids=["dist", "memory", "checkpoint", "gemm"],
)
def test_both_sides_expose_the_same_names(torch_module, tf_module):
    assert public_names(torch_module) == public_names(tf_module)


def test_the_shared_functions_take_the_same_parameters():
    for torch_module, tf_module in ((torch_checkpoint, tf_checkpoint), (torch_dist, tf_dist)):
        for name in public_names(torch_module) - {"DistInfo"}:
            ours = list(inspect.signature(getattr(torch_module, name)).parameters)
            theirs = list(inspect.signature(getattr(tf_module, name)).parameters)
            assert ours == theirs, f"{torch_module.__name__}.{name}"


def test_both_sides_train_on_the_same_synthetic_batches():
    """data.name=synthetic on both pipelines of both frameworks: every rank's batch of every
    step holds the same samples, the same bytes (torch NCHW, TensorFlow NHWC)."""
    import numpy as np
    import tensorflow as tf
    import torch

    from tf_impl.data import build_dataset as tf_dataset
    from torch_impl.data import build_dataset as torch_dataset

    for pipeline in ("tensor", "loader"):
        cfg = config_io.load_config(
            None,
            [
                "data.name=synthetic",
                "data.train_limit=256",
                "train.batch_size=64",
                f"data.pipeline={pipeline}",
                "data.loader_workers=0",
            ],
        )
        for rank in (0, 1):
            spec = cluster.local_spec(2, rank, master_port=1, tf_ports=(2, 3))
            torch_info = torch_dist.DistInfo(spec, torch.device("cpu"), "cpu", "cpu", backend=None)
            tf_info = tf_dist.DistInfo(spec, tf.distribute.get_strategy(), "CPU:0", "cpu", "cpu")
            dims = ParallelDims(2, 1)
            ours = list(torch_dataset(cfg, torch_info, dims).train_batches(epoch=1))
            theirs = list(tf_dataset(cfg, tf_info, dims).train_batches(epoch=1))
            assert len(ours) == len(theirs) == 4
            for (images, labels), (tf_images, tf_labels) in zip(ours, theirs, strict=True):
                np.testing.assert_array_equal(labels.numpy(), tf_labels.numpy())
                nhwc = images.numpy().transpose(0, 2, 3, 1)
                np.testing.assert_array_equal(nhwc, tf_images.numpy())
