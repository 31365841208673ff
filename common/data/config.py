"""The `data` section of the config: which samples a run trains and evaluates on."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictInt
from pydantic import StrictStr as Text

from common.checks.section import Section


class DataConfig(Section):
    name: Literal["mnist", "synthetic"] = "mnist"
    """mnist: the real digits; synthetic: MNIST-shaped images and learnable labels generated
    from a fixed seed (`common.data.synthetic`), the same on both sides and on every machine,
    for model-size runs that should not depend on files or the input pipeline."""
    dir: Text | None = None
    """Folder with the four MNIST IDX files; None means $MNIST_DIR, then ./data/mnist."""
    stage_dir: Text | None = None
    """A node-local folder ($VAR expanded, e.g. $TMPDIR) to copy the data to before reading it,
    so that ranks do not all read the shared file system; results and checkpoints stay in
    output.dir. None: read data.dir directly."""
    pipeline: Literal["tensor", "loader"] = "tensor"
    """tensor: whole dataset preloaded, batches taken by index; loader: the framework's loader."""
    loader_workers: Annotated[StrictInt, Field(ge=0)] = 2
    """Loader pipeline: DataLoader worker processes (torch), map parallel calls (tf.data)."""
    train_limit: Annotated[StrictInt, Field(ge=0)] = 0
    """Use only the first N training samples (0 = all 60,000); for tests and quick looks."""
    test_limit: Annotated[StrictInt, Field(ge=0)] = 0
    """Use only the first N test samples (0 = all 10,000)."""
