"""run_end's error puts the root cause first: followed through `raise ... from`, through the
context of an exception raised while handling another, and through a wrapper that keeps each
rank's failure (torch.distributed.checkpoint's CheckpointException keeps `failures`)."""

import errno

from common.core.run import failures


class Wrapper(BaseException):
    """Like DCP's CheckpointException: a BaseException holding rank -> (exception, traceback)."""

    def __init__(self, held):
        super().__init__(f"ranks {sorted(held)} failed\nTraceback (most recent call last): ...")
        self.failures = held


def raised(make):
    try:
        make()
    except BaseException as failure:  # noqa: BLE001 - the point is to keep any
        return failure
    raise AssertionError("nothing raised")


def deep():
    try:
        raise KeyError("shard 3")
    except KeyError as inner:
        raise RuntimeError("load failed") from inner


def test_the_innermost_cause_comes_first_then_where_then_the_wrappers():
    text = failures.describe(raised(deep))
    assert text.startswith("KeyError: 'shard 3' (at ")
    assert "test_failures.py" in text and "in deep" in text
    assert text.endswith("raised as RuntimeError: load failed)")


def test_a_wrapper_holding_each_ranks_failure_is_opened():
    inner = raised(lambda: [][1])
    text = failures.describe(raised(lambda: (_ for _ in ()).throw(Wrapper({1: (inner, None)}))))
    assert text.startswith("IndexError: list index out of range")
    assert "raised as Wrapper: ranks [1] failed Traceback" in text  # one line


def test_an_error_of_the_operating_system_is_preferred_to_what_it_became():
    def disk():
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("unexpected pos 704 vs 598") from None

    def save():
        try:
            disk()
        except RuntimeError as failure:
            raise OSError(errno.ENOSPC, "No space left on device", "/ckpt") from failure

    text = failures.describe(raised(save))
    assert text.startswith("OSError: [Errno 28] No space left on device: '/ckpt'")
    assert text.endswith("after RuntimeError: unexpected pos 704 vs 598)")


def test_the_line_is_bounded_and_the_cause_survives_the_cut():
    def huge():
        try:
            raise ValueError("the cause")
        except ValueError as inner:
            raise RuntimeError("x" * 100_000) from inner

    text = failures.describe(raised(huge))
    assert len(text) <= failures.LIMIT and "\n" not in text
    assert text.startswith("ValueError: the cause")


def test_a_cycle_in_the_chain_ends():
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert failures.describe(first).startswith("RuntimeError: b")
