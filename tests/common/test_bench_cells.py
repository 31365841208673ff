"""The bench passes a strategy's option only to the strategies that read it: one `--set
torch.sharding=shard_grad_op` made the ddp cell exit 2, and the whole bench failed."""

import argparse

from common.core.config import strategies
from common.tools import bench


def test_an_option_of_some_strategies_goes_to_those_only():
    args = argparse.Namespace(
        models="mlp",
        strategies="single,ddp,fsdp2,hsdp,mwms",
        compile="eager",
        pipelines="tensor",
        nproc=2,
        tf_ranks="",
        train_limit=640,
        device="cpu",
        set=["torch.sharding=shard_grad_op", "torch.wrap=size", "train.seed=3"],
    )
    extras = {}
    for _, label, _, measure in bench.measurements(args, ["torch", "tf"]):
        if "baselines" not in label:
            extras[label.split(" / ")[0]] = measure.args[1].keywords["extra"]
    assert "torch.sharding=shard_grad_op" not in extras["torch ddp"]
    assert "torch.sharding=shard_grad_op" not in extras["torch single"]
    assert "torch.sharding=shard_grad_op" in extras["torch fsdp2"]
    assert "torch.sharding=shard_grad_op" in extras["torch hsdp"]
    assert all("train.seed=3" in extra for extra in extras.values())
    assert strategies.takes(strategies.get("tf", "mwms"), "torch.sharding=shard_grad_op")
