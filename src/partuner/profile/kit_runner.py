"""partuner profiling kit runner: time a kit's sub-models on this machine, write results.json.

Copied into a kit folder as ``run_profile.py`` by ``partuner profile MODEL --kit DIR``. It needs
only Python 3.9+, numpy and the backend the units use (onnxruntime and/or openvino): not
partuner. Run it on the target board::

    python run_profile.py [--out results.json] [--units cpu0,npu] [--budget 0.25]

then bring ``results.json`` back and load it with ``partuner profile MODEL --import
results.json``. It times each item of ``manifest.json`` (one-node and fused-group sub-models,
the model cut into chunks, a no-op call, device copies) on each unit, the hand-off of arrays
between two threads, and records what the unit's fingerprint is on this machine.
"""

from __future__ import annotations

import _thread
import argparse
import hashlib
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

# the backends' telemetry off, as in partuner (partuner/__init__.py, units/openvino_unit.py)
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

FORMAT = "partuner-kit-results"
VERSION = 1
_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def host_cpu_model() -> str:
    """The CPU's model name, as partuner's ``host_cpu_model`` reads it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model") and val.strip():
                    return val.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def fingerprint(fields: dict, version: str, host: str) -> str:
    """A unit's fingerprint, computed as partuner's ``Unit.fingerprint`` does."""
    data = {
        "backend": fields["backend"],
        "version": version,
        "precision": fields["precision"],
        "speed": fields["speed"],
    }
    if fields["host_dependent"]:
        data["host"] = host
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(blob).hexdigest()[:12]
    short = version.split("-")[0].split("+")[0]
    prefix = f"{fields['backend']}-{short}-{fields['tag']}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", prefix) + "-" + digest


def time_call(fn, budget_s: float, min_repeats: int = 5, max_repeats: int = 200) -> list:
    """``[median, p10, p90, count]`` in µs; stops once the median is known to ~3%."""
    for _ in range(2):
        fn()
    samples: list[float] = []
    t_end = time.perf_counter() + budget_s
    while True:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        n = len(samples)
        if n >= max_repeats:
            break
        if n >= min_repeats:
            if time.perf_counter() > t_end:
                break
            q = statistics.quantiles(samples, n=4)
            med = statistics.median(samples)
            if med > 0 and 1.57 * (q[2] - q[0]) / n**0.5 <= 0.03 * med:
                break
    a = np.asarray(samples)
    return [float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90)), n]


def handoff(sizes: list, rounds: int = 60, work_us: float = 200.0) -> dict:
    """Hand an array of each size to another thread through a raw lock (no copy), each thread
    computing ``work_us`` before passing it on; timed from the release to the moment the
    waiting thread runs (as partuner's ``transfer.handoff``)."""
    arrays = {n: np.zeros(max(n // 4, 1), dtype=np.float32) for n in sizes}
    order = [n for _ in range(rounds + 5) for n in sizes]
    steps = len(order)
    gates = [_thread.allocate_lock() for _ in range(steps)]
    for g in gates:
        g.acquire()
    sent, woke = [0.0] * steps, [0.0] * steps
    box: dict = {}
    scratch = [np.ones(4096, dtype=np.float32) for _ in range(2)]

    def lane(side: int) -> None:
        for j in range(side, steps, 2):
            if j:
                gates[j - 1].acquire()
                woke[j] = time.perf_counter()
            until = time.perf_counter() + work_us * 1e-6
            while time.perf_counter() < until:
                np.multiply(scratch[side], 1.0, out=scratch[side])
            box[j] = arrays[order[j]]
            sent[j] = time.perf_counter()
            gates[j].release()

    t = threading.Thread(target=lane, args=(1,), daemon=True)
    t.start()
    lane(0)
    t.join(timeout=10.0)
    samples: dict = {n: [] for n in sizes}
    for j in range(5 * len(sizes), steps):
        samples[order[j - 1]].append((woke[j] - sent[j - 1]) * 1e6)
    out = {}
    for n, s in samples.items():
        a = np.asarray(s)
        out[str(n)] = [
            float(np.median(a)),
            float(np.percentile(a, 10)),
            float(np.percentile(a, 90)),
            len(s),
        ]
    return out


class Backend:
    """Opens sub-model files on one unit; ``open(path)`` returns ``(run, input names)``."""

    def __init__(self, unit: dict) -> None:
        self.unit = unit
        self.kind = unit["backend"]
        if self.kind == "onnxruntime":
            import onnxruntime as ort

            self.ort = ort
            self.version = str(ort.__version__)
        elif self.kind == "openvino":
            sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]
            import openvino as ov

            self.ov = ov
            self.core = ov.Core()
            self.version = str(ov.get_version())
        else:
            raise SystemExit(f"unit {unit['name']!r}: backend {self.kind!r} is not supported")

    def speed(self) -> dict:
        speed = dict(self.unit["fields"]["speed"])
        if self.kind == "openvino" and "device_name" in speed:
            try:
                name = self.core.get_property(self.unit["session"]["device"], "FULL_DEVICE_NAME")
                speed["device_name"] = str(name)
            except Exception:
                speed["device_name"] = "unknown"
        return speed

    def open(self, path: str):
        s = self.unit["session"]
        if self.kind == "onnxruntime":
            ort = self.ort
            so = ort.SessionOptions()
            so.intra_op_num_threads = s["threads"]
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = getattr(
                ort.GraphOptimizationLevel, _LEVELS[s["optimization"]]
            )
            so.add_session_config_entry(
                "session.intra_op.allow_spinning", "1" if s["spinning"] else "0"
            )
            for k, v in s["session_options"].items():
                so.add_session_config_entry(k, v)
            provider = s["provider"]
            if provider == "CUDAExecutionProvider":  # TF32 only where the unit says tf32
                tf32 = "1" if s.get("precision") == "tf32" else "0"
                provider = (provider, {"use_tf32": tf32})
            sess = ort.InferenceSession(path, so, providers=[provider])
            if s["provider"] not in sess.get_providers():  # else its timings are the CPU's
                raise RuntimeError(
                    f"onnxruntime could not set up {s['provider']}; it would run on "
                    f"{sess.get_providers()}"
                )
            outs = [o.name for o in sess.get_outputs()]

            def run(feeds: dict) -> dict:
                return dict(zip(outs, sess.run(None, feeds)))  # noqa: B905 - Python 3.9

            return run, [i.name for i in sess.get_inputs()]
        compiled = self.core.compile_model(path, s["device"], dict(s["config"]))
        req = compiled.create_infer_request()
        ins = [p.get_any_name() for p in compiled.inputs]
        outs = [p.get_any_name() for p in compiled.outputs]

        def run(feeds: dict) -> dict:
            for i, name in enumerate(ins):
                req.set_input_tensor(i, self.ov.Tensor(np.ascontiguousarray(feeds[name])))
            req.infer()
            return {n: np.array(req.get_output_tensor(i).data) for i, n in enumerate(outs)}

        return run, ins


def feeds_for(inputs: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, spec in inputs.items():
        dt = np.dtype(spec["dtype"])
        if np.issubdtype(dt, np.floating):
            out[name] = rng.standard_normal(spec["shape"]).astype(dt)
        else:
            out[name] = np.zeros(spec["shape"], dtype=dt)
    return out


#: OpenVINO's first lines, saying where in its code an error was raised (not what is wrong)
_WHERE = re.compile(r"(Exception from|Check '.*' failed at) \S+:\d+:$")
#: markers of a backend's refusal (the same as partuner.profile.measure's; this file runs alone)
REFUSALS = ("No conversion rule found", "OpConversionFailure", "NOT_IMPLEMENTED")


def run_item(backend: Backend, kit: Path, item: dict, budget_s: float) -> list:
    """``[median, p10, p90, count, status, detail]`` of one item on one unit."""
    try:
        calls = [backend.open(str(kit / f)) for f in item["files"]]
        feeds = feeds_for(item["inputs"])

        def chain() -> None:
            env = dict(feeds)
            for run, names in calls:
                env.update(run({n: env[n] for n in names}))

        return [*time_call(chain, budget_s), "ok", item.get("detail", "")]
    except Exception as exc:  # a rejected sub-model is data
        # the first line saying what is wrong (OpenVINO's open with where it was raised)
        text = [t.strip() for t in str(exc).splitlines() if t.strip()]
        said = [t for t in text if not _WHERE.match(t)] or text
        why = f"{type(exc).__name__}: {said[0][:300] if said else ''}"
        # The backend refusing the item is final; anything else (a crash, a timeout) is a
        # failure that a later run of the kit may not repeat (partuner.profile.measure.refusal).
        refused = isinstance(exc, NotImplementedError) or type(exc).__name__ == "NotImplemented"
        refused = refused or any(m in str(exc) for m in REFUSALS)
        return [None, None, None, 0, "unsupported" if refused else "failed", why]


def _fail(message: str) -> None:
    """One line on stderr, exit 2 (a wrong argument or kit)."""
    print(f"run_profile.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list | None = None) -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description="Run a partuner profiling kit on this machine.")
    ap.add_argument("--kit", default=str(here), help="the kit folder (default: this script's)")
    ap.add_argument("--out", default=None, help="results file (default: KIT/results.json)")
    ap.add_argument("--units", default="", help="comma-separated unit names (default: all)")
    ap.add_argument("--budget", type=float, default=None, help="seconds at most per item")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    kit = Path(args.kit)
    if not (kit / "manifest.json").is_file():
        _fail(
            f"no kit at {kit} (it holds no manifest.json); pass --kit KIT, the folder "
            "`partuner profile MODEL --units FILE --kit KIT` wrote"
        )
    try:
        manifest = json.loads((kit / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        _fail(f"{kit / 'manifest.json'} is not a kit's manifest ({exc}); write the kit again")
    if args.budget is not None and not 0 < args.budget < float("inf"):
        _fail(f"--budget must be a number of seconds > 0, got {args.budget}")
    budget = args.budget if args.budget is not None else manifest["budget_s"]
    wanted = [u for u in args.units.split(",") if u]
    known = [u["name"] for u in manifest["units"]]
    unknown = [u for u in wanted if u not in known]
    if unknown:
        _fail(f"--units names {unknown}, not units of this kit (its units: {known})")
    units = [u for u in manifest["units"] if not wanted or u["name"] in wanted]
    host = host_cpu_model()
    out = Path(args.out) if args.out else kit / "results.json"
    results = {
        "format": FORMAT,
        "version": VERSION,
        "model": manifest["model"],
        "digest": manifest["digest"],
        "host": host,
        "python": platform.python_version(),
        "handoff": handoff(manifest["link_sizes"]),
        "units": [],
    }
    failed: list = []  # units that could run nothing here
    for unit in units:
        backend = Backend(unit)
        speed = backend.speed()
        fields = dict(unit["fields"], speed=speed)
        rows = {}
        items = [i for i in manifest["items"] if unit["name"] in i["units"]]
        for k, item in enumerate(items):
            rows[item["signature"]] = run_item(backend, kit, item, budget)
            if not args.quiet:
                print(f"\r{unit['name']}: {k + 1}/{len(items)}", end="", file=sys.stderr)
        if not args.quiet:
            print(file=sys.stderr)
        if items and all(r[4] == "failed" for r in rows.values()):
            failed.append(unit["name"])
            why = next(iter(rows.values()))[5]
            print(f"unit {unit['name']}: every item failed here ({why})", file=sys.stderr)
        results["units"].append(
            {
                "name": unit["name"],
                "spec": unit["spec"],
                "fingerprint": fingerprint(fields, backend.version, host),
                "backend_version": backend.version,
                "fields": fields,
                "measurements": rows,
            }
        )
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1), encoding="utf-8")
    os.replace(tmp, out)
    if not args.quiet:
        print(f"wrote {out}", file=sys.stderr)
    return 1 if failed else 0  # the results say which units failed; import refuses those


if __name__ == "__main__":
    sys.exit(main())
