"""Live progress: one rewritten line on a terminal, plain lines in a log, nothing when quiet,
and its time handed back to the caller's clock."""

import io

from common.core.train.progress import Progress, duration


class Terminal(io.StringIO):
    def isatty(self):
        return True


def fill(progress, steps=4):
    spent = 0.0
    progress.start_epoch()
    for step in range(1, steps + 1):
        spent += progress.update(epoch=0, step=step, train_s=0.5 * step, loss=lambda: 0.25)
    progress.end_epoch()
    return spent


def test_a_log_gets_plain_lines_with_rate_loss_and_eta():
    log = io.StringIO()
    progress = Progress(
        enabled=True, epochs=2, steps_per_epoch=4, global_batch=64, every_s=0, stream=log
    )
    spent = fill(progress)
    lines = log.getvalue().splitlines()
    assert lines[0] == "epoch 1/2 | step 1/4 | 128 samples/s | loss 0.2500 (chief) | ETA 0:04"
    assert lines[-1].startswith("epoch 1/2 | step 4/4 |") and lines[-1].endswith("ETA 0:02")
    assert len(lines) == 4 and "\r" not in log.getvalue()
    assert spent == progress.spent_s > 0


def test_a_terminal_gets_one_line_rewritten_and_cleared():
    screen = Terminal()
    fill(
        Progress(
            enabled=True, epochs=1, steps_per_epoch=4, global_batch=64, every_s=0, stream=screen
        )
    )
    text = screen.getvalue()
    assert "\n" not in text and text.count("\r") >= 5
    assert text.endswith("\r")  # cleared, so the epoch line that follows stands alone


def test_lines_come_at_most_every_interval_and_quiet_means_nothing():
    log = io.StringIO()
    fill(
        Progress(
            enabled=True, epochs=1, steps_per_epoch=4, global_batch=64, every_s=3600, stream=log
        )
    )
    assert log.getvalue() == ""
    calls = []
    quiet = Progress(
        enabled=False, epochs=1, steps_per_epoch=4, global_batch=64, every_s=0, stream=log
    )
    quiet.update(epoch=0, step=1, train_s=1.0, loss=lambda: calls.append(1) or 0.0)
    assert log.getvalue() == "" and calls == []  # not even the loss was read


def test_durations_read_as_clock_time():
    assert [duration(s) for s in (0, 59.6, 61, 3600 * 2 + 65)] == [
        "0:00",
        "1:00",
        "1:01",
        "2:01:05",
    ]


def test_a_line_is_due_only_when_enabled_and_its_interval_has_passed():
    log = io.StringIO()
    quiet = Progress(enabled=False, epochs=1, steps_per_epoch=4, global_batch=64, every_s=0)
    assert not quiet.due()
    every = Progress(
        enabled=True, epochs=1, steps_per_epoch=4, global_batch=64, every_s=0, stream=log
    )
    every.start_epoch()
    assert every.due()
    hourly = Progress(
        enabled=True, epochs=1, steps_per_epoch=4, global_batch=64, every_s=3600, stream=log
    )
    hourly.start_epoch()
    assert not hourly.due()
    hourly._shown_at -= 3600  # an hour since the epoch began
    assert hourly.due()
