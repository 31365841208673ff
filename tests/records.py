"""Valid metrics records for tests that need a run without training one: typed records
(`common.core.records.records`) and the JSON objects a metrics file holds."""

from typing import Any

from common.core.config import strategies
from common.core.config.config_io import load_config
from common.core.measure import precision
from common.core.records import metrics, provenance
from common.core.records.metrics import MetricsWriter
from common.core.records.record_json import to_json
from common.core.records.records import Epoch, MemoryEntry, RunStart, Step
from common.core.run import recorder
from common.launch.cluster import local_spec

CFG = load_config(None, ["train.target_accuracy=0.9"])
SPEC = local_spec(2, master_port=1, tf_ports=(2, 3), launch_id="t")


class RecordedTrainer:
    """What recorder.run_start reads of a trainer."""

    framework, framework_version, precision = "torch", "2.13.0", "fp32"
    strategy = strategies.get("torch", "ddp")
    device_type = "cpu"
    spec = SPEC

    def versions(self):
        return {"torch": "2.13.0"}

    def numerics(self):
        return precision.numerics(
            precision="none", tf32=False, loss_scaling=False, device_type="cpu"
        )

    def threads(self):
        return {"intra_op": 1, "inter_op": 1}


def start(run_id="r1", cfg=CFG) -> RunStart:
    return recorder.run_start(
        cfg, RecordedTrainer(), run_id=run_id, devices=["cpu", "cpu"], hosts=[]
    )


def epoch(number, accuracy, elapsed) -> Epoch:
    return Epoch(
        time=provenance.utc_now(),
        epoch=number,
        train_loss=0.5,
        val_loss=0.4,
        val_accuracy=accuracy,
        lr=1e-3,
        steps=10,
        samples=640,
        train_time_s=1.5,
        train_clock="train steps, device synchronized",
        eval_time_s=0.2,
        samples_per_s=426.7,
        step_time_p50_s=0.1,
        step_time_p90_s=0.2,
        elapsed_s=elapsed,
        memory=[
            MemoryEntry(
                rank=rank,
                peak_bytes=2**20,
                peak_counts="process peak RSS",
                param_bytes=400,
                grad_bytes=400,
                optim_bytes=800,
            )
            for rank in (0, 1)
        ],
    )


def start_record(run_id="r1", cfg=CFG) -> dict:
    """run_start as a metrics file holds it."""
    return to_json(start(run_id, cfg))


def epoch_record(number, accuracy, elapsed) -> dict:
    """An epoch record as a metrics file holds it (without the fields added after version 1:
    a file written before them)."""
    return to_json(epoch(number, accuracy, elapsed))


def write_run(
    path, epochs=((1, 0.85, 2.0), (2, 0.92, 4.0), (3, 0.95, 6.0)), *, run_id=None, cfg=CFG
):
    """A whole run's file; its run_id is its folder's name unless given."""
    with MetricsWriter(path) as writer:
        writer.write(start(run_id or path.parent.name, cfg))
        written = [writer.write(epoch(*e)) for e in epochs]
        writer.write(Step(epoch=3, step=30, loss=0.3, lr=1e-3))
        writer.write(
            recorder.run_end(CFG, status="success", epochs=written, total_time_s=6.5, error=None)
        )


def read_metrics(path) -> list[dict]:
    """All records of a metrics file as the JSON objects it holds (what another tool reading
    the file sees), each checked; MetricsError at the first problem."""
    result = metrics.scan(path)
    if result.problems or result.cut:
        raise metrics.MetricsError((result.problems or result.cut)[0])
    return result.raw


def changed(record: Any, **fields: Any) -> Any:
    """A copy of a record (frozen) with `fields` changed, unchecked, as a test needs."""
    return record.model_copy(update=fields)
