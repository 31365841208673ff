"""tf_impl pieces in one process: model vs the numpy reference, optimizers vs torch.optim,
pipelines. Single-process pieces use TensorFlow's default strategy (no TF_CONFIG)."""

import numpy as np
import pytest
import tensorflow as tf
import torch

import torch_impl.optim as torch_optim
from common.core.config import config_io
from common.core.config.config import OptimConfig
from common.core.config.strategies import ParallelDims
from common.data.mnist import normalize
from common.launch.cluster import local_spec
from common.models import zoo
from tests import reference
from tf_impl.data import build_dataset
from tf_impl.dist import DistInfo
from tf_impl.model import build_model, get_weights
from tf_impl.optim import build_optimizer, set_learning_rate


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_model_starts_from_the_shared_weights(name, digits):
    described = reference.net(name)
    model = build_model(described, seed=4)
    images = normalize(digits.test_images[:8])
    logits = model(images[..., np.newaxis], training=False).numpy()
    start = reference.initial_weights(described, 4)
    expected = reference.forward(described, start, images, "torch")
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    exported = get_weights(model)
    assert exported.keys() == start.keys()
    for key, array in start.items():
        np.testing.assert_array_equal(exported[key], array)


def _stepped_both(optim: OptimConfig, keras_optimizer, scale: float) -> tuple:
    """(Keras' weights, torch.optim's) after 10 steps from the same weights on the same
    gradients of size `scale`, at a learning rate that changes half-way."""
    rng = np.random.default_rng(7)
    start = rng.standard_normal(50).astype(np.float32)
    keras_weight = tf.Variable(start.copy())
    torch_weight = torch.nn.Parameter(torch.from_numpy(start.copy()))
    reference_optimizer = torch_optim.build_optimizer(optim, [torch_weight])
    for step in range(10):
        lr = optim.lr * (1.0 if step < 5 else 0.3)
        gradient = (scale * rng.standard_normal(50)).astype(np.float32)
        set_learning_rate(keras_optimizer, lr)
        keras_optimizer.apply_gradients([(tf.constant(gradient), keras_weight)])
        torch_optim.set_learning_rate(reference_optimizer, lr)
        torch_weight.grad = torch.from_numpy(gradient)
        reference_optimizer.step()
    return keras_weight.numpy(), torch_weight.detach().numpy()


def _updates_agree(optim: OptimConfig, keras_optimizer, scale: float) -> bool:
    """Whether the two took the same steps to float32 rounding: the weights' moves from the
    start agree to 1e-4 of the largest move (a small gradient moves them by little)."""
    start = np.random.default_rng(7).standard_normal(50).astype(np.float32)
    ours, theirs = _stepped_both(optim, keras_optimizer, scale)
    moved = np.abs(theirs - start).max()
    return bool(np.abs((ours - start) - (theirs - start)).max() <= 1e-4 * moved + 1e-7)


OPTIMIZERS = [
    OptimConfig(name="sgd", lr=0.1),
    OptimConfig(name="sgd", lr=0.1, momentum=0.9, weight_decay=0.01),
    OptimConfig(name="adam", lr=0.01, weight_decay=0.01),
    OptimConfig(name="adadelta", lr=1.0, weight_decay=0.01),
]


@pytest.mark.parametrize("scale", [1.0, 1e-4], ids=["unit-gradients", "small-gradients"])
@pytest.mark.parametrize(
    "optim", OPTIMIZERS, ids=["sgd", "sgd-momentum-wd", "adam-wd", "adadelta-wd"]
)
def test_optimizers_step_exactly_as_torch_optim(optim, scale):
    """Same gradients, a learning rate that changes half-way, gradients of unit size and of
    1e-4 (where Adam's epsilon, 1e-8, is no longer small beside sqrt(v)): the same steps to
    float32 rounding. Keras' own optimizers fail this check
    (`test_keras_own_update_rules_fail_the_same_check`)."""
    assert _updates_agree(optim, build_optimizer(optim), scale)


@pytest.mark.parametrize(
    ("optim", "stock"),
    [
        # momentum: Keras bakes the learning rate into its velocity, so the change half-way
        # shows
        (
            OptimConfig(name="sgd", lr=0.1, momentum=0.9),
            lambda: tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
        ),
        # epsilon: Keras adds it before the bias correction; with no weight decay at all, the
        # epsilon alone tells them apart on small gradients
        (
            OptimConfig(name="adam", lr=0.01),
            lambda: tf.keras.optimizers.Adam(learning_rate=0.01, epsilon=1e-8),
        ),
        # weight decay: Keras' is decoupled (AdamW), torch's coupled L2
        (
            OptimConfig(name="adam", lr=0.01, weight_decay=0.01),
            lambda: tf.keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.01, epsilon=1e-8),
        ),
    ],
    ids=["sgd-momentum", "adam-epsilon", "adamw-decay"],
)
def test_keras_own_update_rules_fail_the_same_check(optim, stock):
    """The check above can fail: on the small gradients Keras' stock rule for the same
    settings takes other steps."""
    assert not _updates_agree(optim, stock(), 1e-4)


def _info(world: int, rank: int) -> DistInfo:
    spec = local_spec(world, rank, master_port=1, tf_ports=tuple(range(2, 2 + world)))
    return DistInfo(spec, tf.distribute.get_strategy(), "CPU:0", "cpu", "cpu")


def test_tensor_and_loader_pipelines_give_the_same_batches_in_plan_order(digits):
    common = ["data.train_limit=640", "train.batch_size=64", "data.loader_workers=2"]
    tensor = config_io.load_config(None, [*common, "data.pipeline=tensor"])
    loader = config_io.load_config(None, [*common, "data.pipeline=loader"])
    for rank in (0, 1):
        a = list(build_dataset(tensor, _info(2, rank), ParallelDims(2, 1)).train_batches(epoch=1))
        data = build_dataset(loader, _info(2, rank), ParallelDims(2, 1))
        b = list(data.train_batches(epoch=1))
        assert len(a) == len(b) == 10
        plan = data.plan.rank_indices(1)
        for step, ((images_a, labels_a), (images_b, labels_b)) in enumerate(zip(a, b, strict=True)):
            assert images_a.shape == (32, 28, 28, 1)
            np.testing.assert_array_equal(labels_a.numpy(), digits.train_labels[plan[step]])
            np.testing.assert_array_equal(labels_a.numpy(), labels_b.numpy())
            np.testing.assert_array_equal(images_a.numpy(), images_b.numpy())


def test_nccl_on_a_machine_without_gpus_is_refused_before_anything_starts():
    from tf_impl.dist import pick_device

    cfg = config_io.load_config(None, ["tf.communication=nccl"])
    with pytest.raises(ValueError, match="tf.communication=nccl needs GPUs"):
        pick_device(cfg, _info(1, 0).spec)


def test_an_epochs_shorter_last_call_traces_no_graph_of_its_own(digits):
    """train.steps_per_call: an epoch's last call is shorter, by a length that changes from
    epoch to epoch, and each new length traced a graph of its own (1.5 s per epoch on 2
    workers, against 0.06 s for a call of 16: K=16 trained at 0.37x of K=1). Its steps run one
    call each, on the step that K=1 runs: two graphs in all, a call of K and one step."""
    from tf_impl.train import TfTrainer

    overrides = ["data.train_limit=640", "train.batch_size=64", "train.steps_per_call=4"]
    trainer = TfTrainer(config_io.load_config(None, overrides), _info(1, 0))
    trainer.build()
    plan = list(trainer.data.plan.rank_indices(1))  # 10 steps: calls of 4, 4 and 2
    for start, end in ((0, 4), (4, 8), (8, 10), (0, 4), (4, 7)):
        losses = trainer.train_steps(plan[start:end], [0.001] * (end - start))
        assert len(losses) == end - start and all(np.isfinite(losses))
    assert trainer.compiled_steps.experimental_get_tracing_count() == 2
    assert trainer.skips.taken == 17


@pytest.mark.parametrize("schedule, with_rate", [("step", False), ("onecycle", True)])
def test_a_rate_goes_into_the_compiled_step_only_when_it_changes_every_step(
    schedule, with_rate, digits
):
    """A rate that changes once an epoch or a run is set on the optimizer when it changes, and
    the compiled step is traced without it (its input and assignment cost 3% of an MLP step on
    a CPU); onecycle's, new at every step, goes into each call. Either way each step runs at
    its own rate, on one trace."""
    from tf_impl.train import TfTrainer

    overrides = ["data.train_limit=640", "train.batch_size=64", f"optim.schedule={schedule}"]
    trainer = TfTrainer(config_io.load_config(None, overrides), _info(1, 0))
    trainer.build()
    plan = list(trainer.data.plan.rank_indices(1))
    for index, lr in enumerate([0.01, 0.01, 0.002]):
        assert np.isfinite(trainer.train_step(plan[index], lr))
        assert trainer.optimizer.learning_rate.numpy() == pytest.approx(lr)
    rate = (tf.constant(0.5),) if with_rate else ()
    trainer.compiled_steps.get_concrete_function(tf.constant(plan[0]), *rate)  # the one traced
    assert trainer.compiled_steps.experimental_get_tracing_count() == 1
