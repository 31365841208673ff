"""A reader follows a step from each side's `main` in at most 5 project frames (main,
loop.execute, train_epochs, train_epoch, train_step), on a real stack: the program runs with
its trainer's train_step wrapped to print the stack of its first call."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MOST_FRAMES = 5
PROBE = """
import json, sys, traceback
import {module} as program
trainer = program.SIDE.trainer
original = trainer.train_step

def train_step(self, *args, **kwargs):
    if not getattr(train_step, "seen", False):
        train_step.seen = True
        stack = [(frame.filename, frame.name) for frame in traceback.extract_stack()]
        print("STACK " + json.dumps(stack), flush=True)
    return original(self, *args, **kwargs)

trainer.train_step = train_step
program.main(sys.argv[1:])
"""


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_main_reaches_train_step_in_at_most_5_frames(module, tmp_path):
    settings = ["data.train_limit=640", "data.test_limit=100", "train.epochs=1"]
    command = [sys.executable, "-c", PROBE.format(module=module), "--quiet"]
    for setting in [*settings, f"output.dir={tmp_path}", "output.run_name=depth"]:
        command += ["--set", setting]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("STACK "))
    stack = json.loads(line[len("STACK ") :])
    ours = [
        (Path(filename).relative_to(REPO).as_posix(), name)
        for filename, name in stack
        if Path(filename).is_relative_to(REPO) and ".venv" not in Path(filename).parts
    ]
    assert stack[-1][1] == "train_step"  # the probe, standing in for the trainer's own
    start = ours.index(("common/core/train/main.py", "main"))
    frames = [*ours[start:], tuple(stack[-1])]  # from main to train_step, both counted
    assert len(frames) <= MOST_FRAMES, frames
