"""Epochs taken in turn with another process (`common.core.run.turns`), as the bench sets a
launched run beside its plain loop: neither's epoch runs beside the other's, and a partner that
goes away leaves the other to go on alone."""

import itertools
import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from common.core.config.cli import RunOptions, parse_train_args
from common.core.run.turns import Turns
from tests.numpy_trainer import driven


def epochs_written(path) -> int:
    if not path.exists():
        return 0
    return sum(json.loads(line)["record"] == "epoch" for line in path.read_text().splitlines())


def test_the_driver_trains_an_epoch_only_while_it_holds_the_turn(tmp_path):
    partner, own = socket.socketpair()
    metrics = tmp_path / "turns" / "metrics.jsonl"
    seen: list[tuple[int, int]] = []  # (epochs written while the partner held the turn, after)

    def the_plain_loop() -> None:  # holds each turn for a while, as a pass of its own would
        loop = Turns(partner.detach())
        for _ in range(3):
            time.sleep(0.3)
            held = epochs_written(metrics)
            loop.give()
            loop.wait()
            seen.append((held, epochs_written(metrics)))
        loop.close()

    beside = threading.Thread(target=the_plain_loop)
    beside.start()
    status, code, records = driven(tmp_path, "turns", None, RunOptions(in_turn_fd=own.detach()))
    beside.join(timeout=30)
    assert (status, code) == ("success", 0)
    assert seen == [(0, 1), (1, 2), (2, 3)]  # one epoch per turn, none while the loop held it
    assert sum(r["record"] == "epoch" for r in records) == 3


def test_a_partner_that_is_gone_leaves_the_run_to_go_on_alone(tmp_path):
    partner, own = socket.socketpair()
    partner.close()
    status, code, records = driven(tmp_path, "alone", None, RunOptions(in_turn_fd=own.detach()))
    assert (status, code) == ("success", 0)
    assert sum(r["record"] == "epoch" for r in records) == 3


def test_two_processes_never_run_a_turn_at_once(tmp_path):
    """A real second process, the plain loop's side: each stamps its turns' start and end."""
    mine, theirs = socket.socketpair()
    child = (
        "import sys, time\n"
        "from common.core.run.turns import Turns\n"
        "turns = Turns(int(sys.argv[1]))\n"
        "for _ in range(4):\n"
        "    start = time.monotonic(); time.sleep(0.05)\n"
        "    print(start, time.monotonic(), flush=True)\n"
        "    turns.give(); turns.wait()\n"
    )
    with theirs:
        plain = subprocess.Popen(
            [sys.executable, "-c", child, str(theirs.fileno())],
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=(theirs.fileno(),),
        )
    run = Turns(mine.detach())
    spans = []
    for _ in range(4):
        run.wait()
        start = time.monotonic()
        time.sleep(0.05)
        spans.append((start, time.monotonic()))
        run.give()
    out, _ = plain.communicate(timeout=30)
    theirs_spans = [tuple(map(float, line.split())) for line in out.splitlines()]
    assert plain.returncode == 0 and len(theirs_spans) == 4
    ordered = sorted([*spans, *theirs_spans])
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(ordered))
    assert ordered[0] == theirs_spans[0]  # the plain loop goes first


@pytest.mark.parametrize(
    "given, said", [("99", "not an open file descriptor"), ("0", "not a socket")]
)
def test_in_turn_is_refused_without_a_socket(given, said, capsys):
    with pytest.raises(SystemExit) as refused:
        parse_train_args("python -m torch_impl.train", None, ["--in-turn", given])
    assert refused.value.code == 2
    assert said in capsys.readouterr().err


def test_a_plain_loop_takes_turns_only_alone_and_once(capsys):
    from common.tools import measure

    for extra in ([], ["--plain-only", "--repeats", "2"]):
        with pytest.raises(SystemExit) as refused:
            measure.baseline_arguments("python -m tf_impl.bench", None, ["--in-turn", "0", *extra])
        assert refused.value.code == 2
        assert "--in-turn: one plain loop alone, beside the run" in capsys.readouterr().err
