"""What a failure says in run_end: its root cause first (the innermost exception's type and
message, then where it was raised), then what it was raised as, in one line of bounded length.
Frameworks wrap the cause: Python's exception chain (`raise ... from`), and wrappers that keep
each rank's failure (torch.distributed.checkpoint's CheckpointException: `failures`, rank ->
(exception, traceback)), are followed down to it."""

from __future__ import annotations

import traceback
from typing import Any

LIMIT = 1000  # characters of a run_end error; the root cause comes first, so it survives
QUOTED = 240  # characters of an outer wrapper's message kept after the root cause


def one_line(text: str) -> str:
    return " ".join(text.split())


def _inner(failure: BaseException) -> tuple[BaseException, list[traceback.FrameSummary]] | None:
    """The exception `failure` wraps and its frames, if it wraps one."""
    wrapped: Any = getattr(failure, "failures", None)
    if isinstance(wrapped, dict) and wrapped:
        first = next(iter(wrapped.values()))
        found, frames = first if isinstance(first, tuple) and len(first) == 2 else (first, None)
        if isinstance(found, BaseException):
            return found, list(frames or traceback.extract_tb(found.__traceback__))
    chained = failure.__cause__ or (None if failure.__suppress_context__ else failure.__context__)
    if chained is None:
        return None
    return chained, list(traceback.extract_tb(chained.__traceback__))


def chain(failure: BaseException) -> list[tuple[BaseException, list[traceback.FrameSummary]]]:
    """`failure` and what it wraps, outermost first, each with the frames it was raised in."""
    links = [(failure, list(traceback.extract_tb(failure.__traceback__)))]
    seen = {id(failure)}
    while (inner := _inner(links[-1][0])) is not None and id(inner[0]) not in seen:
        links.append(inner)
        seen.add(id(inner[0]))
    return links


def root_cause(failure: BaseException) -> tuple[BaseException, str]:
    """(the root cause, "file:line in function" where it was raised, or ""): the innermost
    exception, unless the chain holds an error of the operating system (an OSError with an
    errno: a full disk, a refused connection), which says plainest what went wrong."""
    links = chain(failure)
    from_os = [link for link in links if isinstance(link[0], OSError) and link[0].errno]
    root, frames = (from_os or links)[-1]
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return root, where


def _quoted(failure: BaseException) -> str:
    text = one_line(str(failure))
    return text if len(text) <= QUOTED else text[:QUOTED] + "..."


def describe(failure: BaseException, limit: int = LIMIT) -> str:
    """ "RootType: its message (at file:line in function; raised as OuterType: ...)"."""
    root, where = root_cause(failure)
    text = f"{type(root).__name__}: {one_line(str(root))}"
    notes = [f"at {where}"] if where else []
    if root is not failure:
        notes.append(f"raised as {type(failure).__name__}: {_quoted(failure)}")
    innermost = chain(failure)[-1][0]
    if innermost is not root:
        notes.append(f"after {type(innermost).__name__}: {_quoted(innermost)}")
    if notes:
        text += f" ({'; '.join(notes)})"
    return text if len(text) <= limit else text[: limit - 3] + "..."
