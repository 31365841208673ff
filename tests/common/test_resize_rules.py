"""What a checkpoint may load into (`common.core.run.resume.conflicts`): another world size
where the strategy reshards, another strategy where DCP holds the same tensors, and never
another framework, model, optimizer or global batch."""

from common.core.config import config_io
from common.core.run.resume import conflicts, identity


def described(framework="torch", strategy="fsdp2", world_size=4, *overrides):
    setting = [f"torch.strategy={strategy}"] if framework == "torch" else []
    cfg = config_io.load_config(None, [*setting, *overrides])
    config = config_io.to_dict(cfg)
    return identity(framework=framework, strategy=strategy, world_size=world_size, config=config)


def test_a_strategy_that_reshards_loads_at_another_world_size():
    for strategy in ("ddp", "fsdp2", "fsdp1", "hsdp"):
        for before, after in ((4, 2), (4, 1), (2, 4)):
            assert (
                conflicts(described("torch", strategy, before), described("torch", strategy, after))
                == []
            )
    assert conflicts(described("tf", "mwms", 2), described("tf", "mwms", 1)) == []
    assert conflicts(described("tf", "mwms", 1), described("tf", "mwms", 2)) == []


def test_ddp_and_fsdp2_load_each_others_checkpoints_and_the_rest_is_refused_saying_why():
    assert conflicts(described("torch", "ddp", 4), described("torch", "fsdp2", 2)) == []
    assert conflicts(described("torch", "fsdp2", 2), described("torch", "ddp", 4)) == []
    (why,) = conflicts(described("torch", "fsdp1", 4), described("torch", "ddp", 4))
    assert why.startswith("strategy: 'fsdp1' in the checkpoint, 'ddp' now")
    assert "the same whole tensors under the same names: ddp from fsdp2; fsdp2 from ddp" in why


def test_a_global_batch_per_rank_cannot_change_size():
    per_rank = ["train.batch_mode=per_rank"]
    (why,) = conflicts(
        described("torch", "ddp", 4, *per_rank), described("torch", "ddp", 2, *per_rank)
    )
    assert "the global batch would go from 64 x 4 to 64 x 2" in why
    assert "train.batch_mode=global" in why
    assert (
        conflicts(described("torch", "ddp", 4, *per_rank), described("torch", "ddp", 4, *per_rank))
        == []
    )


def test_what_makes_another_run_is_named_every_time():
    found = conflicts(
        described("torch", "fsdp2", 4, "model.name=mlp", "optim.name=adam"),
        described("torch", "fsdp2", 2, "model.name=cnn", "optim.name=sgd"),
    )
    assert [line.split(":")[0] for line in found] == ["model.name", "optim.name"]
    other = conflicts(described("torch", "ddp", 2), described("tf", "mwms", 2))
    assert other[0] == "framework: 'torch' in the checkpoint, 'tf' now"


def test_a_folder_without_a_checkpoint_keeps_its_size_and_strategy():
    found = conflicts(
        described("torch", "ddp", 4), described("torch", "fsdp2", 2), held_in="the folder"
    )
    assert found[:2] == [
        "strategy: 'ddp' in the folder, 'fsdp2' now",
        "world_size: 4 in the folder, 2 now",
    ]
