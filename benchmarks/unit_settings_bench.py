"""The measurements behind the units' default settings (docs/units.md).

1. onnxruntime intra-op spinning, 2-thread units: one unit alone, two at once, a chain of
   8 sessions on one unit (spinning on, off, and only during a run), and a whole model
   (zoo squeezenet) run back to back as one session (what a one-partition plan does).
2. OpenVINO CPU pinning, 1-thread units: speedup of two units running at once.
3. OpenVINO f32 vs bf16 on the same Conv.
4. Handing an array to another Python thread (latency) and copying 1 MiB (bandwidth).

    python benchmarks/unit_settings_bench.py [--quick]

Writes benchmarks/results/unit_settings.json and prints the figures.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, median_us, write_result  # noqa: E402

from partuner.units import make_unit  # noqa: E402


def conv_model(cin: int = 32, cout: int = 64, size: int = 56):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, size, size])
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")
    g = helper.make_graph([node], "conv", [x], [y], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _pair_us(r1, r2, feeds, n: int) -> float:
    """Median time of running r1 and r2 at once, one per thread."""
    barrier = threading.Barrier(3)
    done = threading.Barrier(3)
    stop = [False]

    def work(r):
        while True:
            barrier.wait()
            if stop[0]:
                return
            r.run(feeds)
            done.wait()

    ts = [threading.Thread(target=work, args=(r,), daemon=True) for r in (r1, r2)]
    for t in ts:
        t.start()
    samples = []
    for i in range(n + 3):
        t0 = time.perf_counter()
        barrier.wait()
        done.wait()
        if i >= 3:
            samples.append(time.perf_counter() - t0)
    stop[0] = True
    barrier.wait()
    return float(np.median(samples) * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 20 if args.quick else 200
    model = conv_model()
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 32, 56, 56)).astype(np.float32)}
    out: dict[str, object] = {"machine": machine(), "repeats": n, "op": "Conv 32->64 3x3 56x56"}

    spin = {}
    for flag in (True, False):
        a = make_unit("a", "onnxruntime", threads=2, spinning=flag).prepare(model)
        b = make_unit("b", "onnxruntime", threads=2, spinning=flag).prepare(model)
        spin["on" if flag else "off"] = {
            "alone_us": median_us(lambda a=a: a.run(feeds), n),
            "two_at_once_us": _pair_us(a, b, feeds, n),
        }
    out["onnxruntime_2thread_spinning"] = spin

    # A plan's partitions are separate sessions: a chain of 8 (each a 32->32 Conv) on one
    # 2-thread unit, the way a unit runs its partitions one after another.
    chain_model = conv_model(32, 32)
    chain = {}
    for flag in (True, False, "run"):
        rs = [
            make_unit(f"c{i}", "onnxruntime", threads=2, spinning=flag).prepare(chain_model)
            for i in range(8)
        ]

        def run_chain(rs=rs):
            x = feeds
            for r in rs:
                x = {"x": r.run(x)["y"]}

        chain[str(flag).lower()] = median_us(run_chain, max(n // 4, 5))
    out["onnxruntime_2thread_chain_of_8_sessions_us"] = chain

    # A one-partition plan: one session run back to back (Unit.alone() keeps spinning there).
    from partuner.graph import load_model, zoo
    from partuner.profile.measure import random_feeds

    sq = load_model(zoo.build("squeezenet", image_size=224))
    sq_feeds = random_feeds(sq, list(sq.inputs))
    whole = {}
    runners = {
        str(flag).lower(): make_unit("w", "onnxruntime", threads=2, spinning=flag).prepare(sq.model)
        for flag in (True, False, "run")
    }
    for _ in range(3):  # interleaved rounds: a noisy moment hits every setting alike
        for key, r in runners.items():
            whole.setdefault(key, []).append(median_us(lambda r=r: r.run(sq_feeds), n // 4))
    out["onnxruntime_2thread_squeezenet_alone_us"] = {
        k: float(np.median(v)) for k, v in whole.items()
    }

    try:
        import openvino  # noqa: F401

        pin = {}
        for flag in (True, False):
            a = make_unit("a", "openvino", threads=1, pinning=flag).prepare(model)
            b = make_unit("b", "openvino", threads=1, pinning=flag).prepare(model)
            alone = median_us(lambda a=a: a.run(feeds), n)
            pair = _pair_us(a, b, feeds, n)
            pin["on" if flag else "off"] = {
                "alone_us": alone,
                "two_at_once_us": pair,
                "speedup": 2 * alone / pair,
            }
        out["openvino_1thread_pinning"] = pin
        prec = {}
        for p in ("f32", "bf16"):
            unit = make_unit("a", "openvino", threads=1, precision=p)
            ok, why = unit.availability()
            if not ok:  # a CPU without bf16: say so instead of failing the whole benchmark
                out.setdefault("openvino_precision_unavailable", {})[p] = why
                continue
            r = unit.prepare(model)
            prec[p] = median_us(lambda r=r: r.run(feeds), n)
        out["openvino_precision_us"] = prec
    except ImportError:
        out["openvino"] = "not installed"

    q_in: queue.SimpleQueue = queue.SimpleQueue()
    q_out: queue.SimpleQueue = queue.SimpleQueue()

    def echo() -> None:
        while (item := q_in.get()) is not None:
            q_out.put(item)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    arr = np.zeros(1 << 18, np.float32)
    rt = median_us(lambda: (q_in.put(arr), q_out.get()), n * 5)
    q_in.put(None)
    src = np.ones(1 << 18, np.float32)  # 1 MiB
    copy_us = median_us(lambda: src.copy(), n * 5)
    out["thread_handoff_us"] = rt / 2
    out["copy_1mib_gbps"] = (1 << 20) / (copy_us * 1e3)
    path = write_result("unit_settings", out)
    import json

    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
