"""The two frameworks' entry points, as the tools start them (`common.tools.bench`, `sizes`,
`preflight`, slurm/sweep.py): each framework is a package with the same programs, a training
program, a baseline benchmark and a preflight probe, started as `python -m` modules in
processes of their own, so that nothing in common/ imports a framework."""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    name: str
    """"torch" or "tf": also its config section, where `strategy` chooses its strategy."""
    package: str
    compile_key: str
    """The config key that compiles its step (torch.compile, XLA)."""

    @property
    def train_module(self) -> str:
        return f"{self.package}.train"

    @property
    def bench_module(self) -> str:
        return f"{self.package}.bench"

    @property
    def preflight_module(self) -> str:
        return f"{self.package}.preflight"

    def train_command(self, settings: list[str], *flags: str) -> list[str]:
        """`python -m <package>.train` with `--set` for each of `settings`, then `flags`."""
        command = [sys.executable, "-m", self.train_module, *flags]
        for setting in settings:
            command += ["--set", setting]
        return command

    def own(self, settings: list[str]) -> list[str]:
        """The settings that reach this framework: the shared sections' and its own, not the
        other framework's (torch.* does not reach TensorFlow)."""
        others = {f"{name}." for name in FRAMEWORKS if name != self.name}
        return [s for s in settings if not s.startswith(tuple(others))]


FRAMEWORKS: dict[str, Framework] = {
    "torch": Framework("torch", "torch_impl", compile_key="torch.compile"),
    "tf": Framework("tf", "tf_impl", compile_key="tf.jit_compile"),
}


def get(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; choose from {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[name]


def local_launch(nproc: int) -> list[str]:
    """The command prefix that starts `nproc` ranks of a command on this machine."""
    return [sys.executable, "-m", "common.launch", "--nproc", str(nproc), "--"]
