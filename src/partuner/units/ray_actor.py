"""What runs on a Ray node for a :class:`~partuner.units.ray_unit.RayUnit`: an actor holding the
backend unit and its runners (``units/ray_unit.py`` places it and calls it)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from typing import Any

from partuner.units.base import Runner

__all__ = ["UnitActor"]


def _pin(name: str, cores: tuple[int, ...] | None) -> str:
    """Pin every thread of this process to the ``cores`` the node has (its timings' load is then
    other work's there: profile/load.py); returns a warning naming those it lacks, or ""."""
    if not cores or not hasattr(os, "sched_setaffinity"):  # Linux only
        return ""
    usable = os.sched_getaffinity(0)
    for tid in os.listdir("/proc/self/task") if set(cores) & usable else ():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), set(cores) & usable)
    lack = sorted(set(cores) - usable)
    where = f"that its Ray node lacks (usable there: {sorted(usable)}); fix 'cores'"
    return f"unit {name!r} declares cores {lack} {where}" if lack else ""


class UnitActor:
    """What runs on the node: the backend unit, its runners, and helpers for measuring."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        from partuner.units.base import make_unit

        options = dict(spec)
        backend = options.pop("backend")
        self.unit = make_unit(name, backend, **options)
        self.warning = _pin(name, self.unit.cores)
        self.runners: dict[int, Runner] = {}
        self.count = 0

    def info(self) -> dict[str, Any]:
        import ray

        from partuner import __version__
        from partuner.units.base import host_cpu_model

        ok, why = self.unit.availability()
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "host": host_cpu_model(),
            "available": ok,
            "reason": why,
            "fingerprint": self.unit.fingerprint(),
            "backend_version": self.unit.backend_version(),
            "partuner": __version__,
            "warning": self.warning,
        }

    def prepare(self, model: bytes, alone: bool) -> tuple[int, tuple, tuple]:
        import onnx

        unit = self.unit.alone() if alone else self.unit
        runner = unit.prepare(onnx.load_from_string(model))
        self.count += 1
        self.runners[self.count] = runner
        return self.count, tuple(runner.input_names), tuple(runner.output_names)

    def run(self, rid: int, names: list[str], *values: Any) -> tuple:
        """Run runner ``rid`` on ``names`` -> ``values`` (Ray resolved any object refs among
        them, fetching from the node that holds them); returns the outputs' sizes, then the
        outputs in ``output_names`` order (one object each)."""
        runner = self.runners[rid]
        out = runner.run(dict(zip(names, values, strict=True)))
        arrays = [out[n] for n in runner.output_names]
        return (tuple(int(getattr(a, "nbytes", 0)) for a in arrays), *arrays)

    def close(self, rid: int) -> None:
        runner = self.runners.pop(rid, None)
        if runner is not None:
            runner.close()

    def layer_profile(self, model: bytes, feeds: dict[str, Any], runs: int) -> Any:
        import onnx

        return self.unit.layer_profile(onnx.load_from_string(model), feeds, runs)

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(unit, *args)`` on the node: partuner's own functions (profiling), never code
        read from a file."""
        return fn(self.unit, *args)

    def ping(self) -> None:
        return None

    def take(self, x: Any) -> None:
        return None

    def give(self, nbytes: int) -> Any:
        import numpy as np

        return np.ones(nbytes, dtype=np.uint8)
