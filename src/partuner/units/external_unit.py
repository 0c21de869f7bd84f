"""The ``external`` backend: bring your own compiler (BYOC) and runtime.

A vendor toolchain usually has two halves: a command-line compiler that turns an ONNX file into
an artifact (an engine, a blob), and a Python runtime that loads the artifact and runs it. This
unit glues them in:

    units:
      npu:
        backend: external
        compile: "vendorc --input {onnx} --output {artifact} --O3"
        runner: vendor_rt.partuner:load       # module:function
        compile_timeout_s: 300
        precision: f16
        ops: [Conv, Relu, MaxPool, Concat]

Options
-------
compile : command template run once per prepared sub-model (optional: without it the artifact is
    the ONNX file itself). ``{onnx}`` is the sub-model's path, ``{artifact}`` the path the
    compiler must write, ``{python}`` this Python interpreter. The template is split like a shell
    line (``shlex``) and run without a shell, so paths with spaces are safe.
runner : ``module:function``. ``function(artifact_path)`` returns an object with
    ``run(feeds) -> {output name: array}`` (and optionally ``close()``), or a callable doing the
    same; a list of arrays in the model's output order is accepted too.
compile_timeout_s : seconds the compiler may take (default 600).
precision : ``f32`` (default), ``f16`` or ``bf16``: sets the check's tolerance.
host_memory : whether the runner computes in host memory (default false: a device).

A failing or timed-out compile raises :class:`~partuner.errors.UnitError` with the end of the
command's stderr; profiling stores it as ``failed`` and tries again on its next run. A runner
that raises ``NotImplementedError`` (when loading or running) says the unit cannot run the
sub-model: profiling stores that as ``unsupported`` for good. The fingerprint covers the
compile template and the runner, plus the runner module's ``__version__`` when it has one.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from partuner.errors import UnitError, UnitUnavailableError
from partuner.units.base import (
    Runner,
    Unit,
    opt_bool,
    opt_choice,
    opt_number,
    register_backend,
)

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = ["ExternalRunner", "ExternalUnit", "load_entry_point"]

log = logging.getLogger(__name__)


def _tail(text: str, limit: int = 300) -> str:
    """The last ``limit`` characters of ``text`` on one line."""
    flat = " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return ("..." + flat[-limit:]) if len(flat) > limit else flat


def load_entry_point(spec: str, what: str = "runner") -> Callable[..., Any]:
    """Import ``module:function``; raises UnitError naming what is wrong."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise UnitError(f"option {what!r} must be 'module:function', got {spec!r}")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        raise UnitError(
            f"cannot import {what} module {module!r} ({type(exc).__name__}: {exc}); "
            "install the vendor's Python package or fix the option"
        ) from None
    obj: Any = mod
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        raise UnitError(f"{what} {spec!r}: module {module!r} has no callable {attr!r}")
    return obj


class ExternalRunner(Runner):
    """A vendor runtime holding one compiled artifact."""

    def __init__(
        self, unit_name: str, handle: Any, workdir: Path, input_names: Any, output_names: Any
    ) -> None:
        self.unit_name = unit_name
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)
        self._handle = handle
        run = getattr(handle, "run", None)
        self._run = run if callable(run) else handle
        if not callable(self._run):
            raise UnitError(
                f"unit {unit_name!r}: the runner returned {type(handle).__name__}, which has no "
                "run(feeds) and is not callable"
            )
        self._workdir = workdir

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._handle is None:
            raise UnitError(f"unit {self.unit_name!r}: the runner is closed")
        outs = self._run(dict(feeds))
        if isinstance(outs, list | tuple):
            outs = dict(zip(self.output_names, outs, strict=False))
        if not isinstance(outs, Mapping):
            raise UnitError(
                f"unit {self.unit_name!r}: the runner returned {type(outs).__name__}; it must "
                "return a dict of output name -> array"
            )
        missing = [o for o in self.output_names if o not in outs]
        if missing:
            raise UnitError(
                f"unit {self.unit_name!r}: the runner returned no {missing}; it returned "
                f"{sorted(outs)}"
            )
        return {o: outs[o] for o in self.output_names}

    def close(self) -> None:
        handle, self._handle = self._handle, None
        close = getattr(handle, "close", None)
        try:
            if callable(close):
                close()
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)


@register_backend("external")
class ExternalUnit(Unit):
    """A unit whose sub-models a vendor compiler builds and a vendor runtime runs."""

    OPTIONS = {
        "compile": "command template with {onnx} and {artifact} (and {python}); optional",
        "runner": "module:function loading an artifact, returning an object with run(feeds)",
        "compile_timeout_s": "seconds the compile command may take (default 600)",
        "precision": "f32 (default), f16 or bf16: the check's tolerance",
        "host_memory": "true/false: the runner computes in host memory (default false)",
    }

    def _configure(self, options: dict[str, Any]) -> dict[str, Any]:
        compile_cmd = options.pop("compile", None)
        if compile_cmd is not None:
            if isinstance(compile_cmd, list | tuple):
                compile_cmd = shlex.join(str(a) for a in compile_cmd)
            if not isinstance(compile_cmd, str) or "{artifact}" not in compile_cmd:
                raise UnitError(
                    "option 'compile' must be a command with {onnx} and {artifact}, e.g. "
                    f"'vendorc {{onnx}} -o {{artifact}}', got {compile_cmd!r}"
                )
            try:
                shlex.split(compile_cmd)
            except ValueError as exc:
                raise UnitError(f"option 'compile' cannot be split: {exc}") from None
        runner = options.pop("runner", None)
        if not isinstance(runner, str) or runner.count(":") != 1 or runner.startswith(":"):
            raise UnitError(f"option 'runner' must be 'module:function', got {runner!r}")
        timeout = opt_number(options, "compile_timeout_s", 600.0, positive=True)
        self.precision = opt_choice(options, "precision", "f32", ["f32", "f16", "bf16"])
        host = opt_bool(options, "host_memory", False)
        return {
            "compile": compile_cmd,
            "runner": runner,
            "compile_timeout_s": timeout,
            "precision": self.precision,
            "host_memory": host,
        }

    @property
    def host_memory(self) -> bool:
        return bool(self.options["host_memory"])

    def _module(self) -> str:
        return str(self.options["runner"]).partition(":")[0]

    def backend_version(self) -> str:
        mod = sys.modules.get(self._module())
        return str(getattr(mod, "__version__", "0")) if mod is not None else "0"

    def _speed_options(self) -> dict[str, Any]:
        return {"compile": self.options["compile"], "runner": self.options["runner"]}

    def _fingerprint_tag(self) -> str:
        return f"{self._module().split('.')[0]}-{self.precision}"

    def _argv(self, onnx_path: Path, artifact: Path) -> list[str]:
        subst = {"{onnx}": str(onnx_path), "{artifact}": str(artifact), "{python}": sys.executable}
        argv = []
        for tok in shlex.split(self.options["compile"]):
            for key, value in subst.items():
                tok = tok.replace(key, value)
            argv.append(tok)
        return argv

    def availability(self) -> tuple[bool, str]:
        module = self._module()
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return False, f"runner module {module!r} is not importable: install the vendor package"
        cmd = self.options["compile"]
        if cmd is None:
            return True, f"runner {self.options['runner']} (ONNX as the artifact)"
        exe = self._argv(Path("m.onnx"), Path("a"))[0]
        if shutil.which(exe) is None:
            return False, f"compiler {exe!r} not found on PATH: install it or fix 'compile'"
        return True, f"compiler {exe}, runner {self.options['runner']}"

    def prepare(self, model: onnx.ModelProto) -> ExternalRunner:
        import onnx

        ok, reason = self.availability()
        if not ok:
            raise UnitUnavailableError(f"unit {self.name!r} cannot run here: {reason}")
        workdir = Path(tempfile.mkdtemp(prefix=f"partuner-{self.name}-"))
        try:
            onnx_path = workdir / "model.onnx"
            onnx.save_model(model, onnx_path)
            artifact = onnx_path
            if self.options["compile"] is not None:
                artifact = workdir / "artifact"
                self._compile(onnx_path, artifact)
            load = load_entry_point(self.options["runner"])
            try:
                handle = load(str(artifact))
            except Exception as exc:
                raise UnitError(
                    f"unit {self.name!r}: runner {self.options['runner']} failed to load "
                    f"{artifact.name}: {type(exc).__name__}: {_tail(str(exc), 200)}"
                ) from exc
            return ExternalRunner(
                self.name,
                handle,
                workdir,
                [i.name for i in model.graph.input],
                [o.name for o in model.graph.output],
            )
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise

    def _compile(self, onnx_path: Path, artifact: Path) -> None:
        argv = self._argv(onnx_path, artifact)
        timeout = self.options["compile_timeout_s"]
        log.debug("unit %s: compiling: %s", self.name, shlex.join(argv))
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
            raise UnitError(
                f"unit {self.name!r}: compile command timed out after {timeout:g} s "
                f"(compile_timeout_s): {argv[0]}; stderr: {_tail(err) or '(empty)'}"
            ) from None
        except OSError as exc:
            raise UnitError(
                f"unit {self.name!r}: cannot start the compile command {argv[0]!r}: "
                f"{exc.strerror or exc}"
            ) from None
        if done.returncode != 0:
            raise UnitError(
                f"unit {self.name!r}: compile command failed (exit {done.returncode}): "
                f"{argv[0]}; stderr: {_tail(done.stderr) or '(empty)'}"
            )
        if not artifact.exists():
            raise UnitError(
                f"unit {self.name!r}: the compile command succeeded but wrote no {{artifact}} "
                f"({artifact}); does the template pass {{artifact}} as the output path?"
            )
