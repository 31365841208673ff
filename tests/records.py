"""Valid metrics records for tests that need a run without training one."""

from common.core import metrics, precision, run
from common.core.config_io import load_config
from common.launch.cluster import local_spec

CFG = load_config(None, ["train.target_accuracy=0.9"])
SPEC = local_spec(2, master_port=1, tf_ports=(2, 3), launch_id="t")


def start_record(run_id="r1", cfg=CFG):
    return run.run_start_record(
        cfg,
        SPEC,
        run_id=run_id,
        framework="torch",
        framework_version="2.13.0",
        strategy="ddp",
        device_type="cpu",
        devices=["cpu", "cpu"],
        versions={"torch": "2.13.0"},
        precision="fp32",
        numerics=precision.numerics(
            precision="none", tf32=False, loss_scaling=False, device_type="cpu"
        ),
        threads={"intra_op": 1, "inter_op": 1},
    )


def epoch_record(epoch, accuracy, elapsed):
    return {
        "record": "epoch",
        "time": run.utc_now(),
        "epoch": epoch,
        "train_loss": 0.5,
        "val_loss": 0.4,
        "val_accuracy": accuracy,
        "lr": 1e-3,
        "steps": 10,
        "samples": 640,
        "train_time_s": 1.5,
        "train_clock": "train steps, device synchronized",
        "eval_time_s": 0.2,
        "samples_per_s": 426.7,
        "step_time_p50_s": 0.1,
        "step_time_p90_s": 0.2,
        "elapsed_s": elapsed,
        "memory": [
            {
                "rank": r,
                "peak_bytes": 2**20,
                "peak_counts": "process peak RSS",
                "param_bytes": 400,
                "grad_bytes": 400,
                "optim_bytes": 800,
            }
            for r in (0, 1)
        ],
    }


def write_run(
    path, epochs=((1, 0.85, 2.0), (2, 0.92, 4.0), (3, 0.95, 6.0)), *, run_id=None, cfg=CFG
):
    """A whole run's file; its run_id is its folder's name unless given."""
    with metrics.MetricsWriter(path) as writer:
        writer.write(start_record(run_id or path.parent.name, cfg))
        written = [writer.write(epoch_record(*e)) for e in epochs]
        writer.write({"record": "step", "epoch": 3, "step": 30, "loss": 0.3, "lr": 1e-3})
        writer.write(run.run_end_record(CFG, status="success", epochs=written, total_time_s=6.5))
