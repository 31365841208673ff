"""The command line of the training programs (`torch_impl.train`, `tf_impl.train`: the same on
both sides): the config arguments, and how this launch relates to the run's earlier ones."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from dataclasses import dataclass

from common.core.config import strategies
from common.core.config.config_io import add_config_arguments


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    """How this launch relates to the run's earlier launches (the training command line)."""

    resume: bool = False
    """Go on from the run's latest complete checkpoint; fail if there is none."""
    auto_resume: bool = False
    """Go on from the latest complete checkpoint if there is one, else start afresh."""
    stop_after_epoch: int = 0
    """Checkpoint after this epoch and stop (0: never)."""
    stop_after_step: int = 0
    """Checkpoint after this global optimizer step (from 1) and stop (0: never)."""
    progress: bool = True
    """Show live progress inside each epoch (the chief only)."""
    progress_every_s: float | None = None
    """Seconds between progress lines (default: 0.5 on a terminal, 30 in a log file)."""
    in_turn_fd: int | None = None
    """A socket to take each epoch in turn with another process over (`common.core.run.turns`:
    the bench's plain loop); None: alone."""


def check_socket(fd: int) -> None:
    """ValueError unless `fd` is an open socket of this process (`--in-turn`'s, and
    `common.core.run.turns`')."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError as error:
        raise ValueError(f"{fd} is not an open file descriptor ({error.strerror})") from None
    if not stat.S_ISSOCK(mode):
        raise ValueError(f"file descriptor {fd} is not a socket")


def strategy_list() -> str:
    """The strategies each framework offers (`torch.strategy=`, `tf.strategy=`), from the
    registry, for --help."""
    lines = ["strategies (from common.core.config.strategies):"]
    for framework in ("torch", "tf"):
        for name, entry in strategies.of(framework).items():
            lines.append(f"  {framework}.strategy={name}: {entry.summary}")
    return "\n".join(lines)


def answer_help_early(prog: str, description: str | None) -> None:
    """`--help` of a training program without importing its framework first (seconds): call
    it before the framework imports. Prints the help and exits when asked for it."""
    if {"-h", "--help"} & set(sys.argv[1:]):
        parse_train_args(prog, description, ["--help"])


def parse_train_args(
    prog: str, description: str | None, argv: list[str] | None
) -> tuple[argparse.Namespace, RunOptions]:
    """The command line of `torch_impl.train` and `tf_impl.train` (the same on both sides):
    the config arguments for `config_io.config_from_args`, and the run options."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=strategy_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on from the run's latest complete checkpoint (the run folder is "
        "output.dir/output.run_name)",
    )
    parser.add_argument(
        "--stop-after-epoch",
        type=int,
        default=0,
        metavar="N",
        help="checkpoint after epoch N and stop (status aborted)",
    )
    parser.add_argument(
        "--stop-after-step",
        type=int,
        default=0,
        metavar="N",
        help="checkpoint after global step N (from 1; with train.steps_per_call K, at the end "
        "of the call that holds it) and stop (status aborted)",
    )
    parser.add_argument(
        "--auto-resume",
        action="store_true",
        help="like --resume when the run has a complete checkpoint, else start afresh "
        "(what a requeued SLURM job wants)",
    )
    parser.add_argument("--quiet", action="store_true", help="no live progress inside the epochs")
    parser.add_argument(
        "--progress-every",
        type=float,
        metavar="S",
        help="seconds between progress lines (default 0.5 on a terminal, 30 in a log)",
    )
    parser.add_argument(
        "--in-turn",
        type=int,
        metavar="FD",
        help="take each epoch in turn with another process over the socket FD, inherited from "
        "the bench (common.tools.bench) that starts this run beside its plain loop",
    )
    args = parser.parse_args(argv)
    if args.in_turn is not None:
        try:
            check_socket(args.in_turn)
        except ValueError as error:
            parser.error(f"--in-turn {args.in_turn}: {error}; only the bench passes it")
    if args.progress_every is not None and not args.progress_every >= 0:
        parser.error(f"--progress-every must be >= 0 seconds, got {args.progress_every}")
    if args.stop_after_epoch < 0:
        parser.error(
            f"--stop-after-epoch must be 0 (never) or an epoch >= 1, got {args.stop_after_epoch}"
        )
    if args.stop_after_step < 0:
        parser.error(
            f"--stop-after-step must be 0 (never) or a step >= 1, got {args.stop_after_step}"
        )
    options = RunOptions(
        resume=args.resume,
        auto_resume=args.auto_resume,
        stop_after_epoch=args.stop_after_epoch,
        stop_after_step=args.stop_after_step,
        progress=not args.quiet,
        progress_every_s=args.progress_every,
        in_turn_fd=args.in_turn,
    )
    return args, options
