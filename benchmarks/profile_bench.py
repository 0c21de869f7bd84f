"""`partuner profile` on demo models with two 1-thread onnxruntime units.

For each model: profiling wall time with a fresh store (cold) and again on the same store (warm),
with automatic fused groups (``--fuse auto``, chains of up to 3 nodes) and, separately on a fresh
store, without groups; the number of distinct node and chain signatures; the groups kept; and the
additivity error (no-op call + isolated node times vs the whole model, in %) without and with
the kept groups' savings, and in context (no-op call + onnxruntime's own per-kernel times of a
whole-model run, mapped back to the ONNX nodes: what the planner's node costs are built from);
the share of kernel time that maps to a node; the fitted link between the two units.

Models: googlenet, resnet18 and squeezenet from partuner's zoo, and resnet50 (the zoo's when it
has one, else a resnet50-shaped model built here with onnx.helper: bottleneck blocks 3-4-6-3,
random weights).

    python benchmarks/profile_bench.py [--quick]

``--quick`` uses 32x32 inputs, the resnet50-shaped model built here at a quarter of the width
(``resnet50/4``) and a short time budget per item (to check the script works). Writes
benchmarks/results/profile.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, temp_dir, write_result  # noqa: E402

from partuner.graph import load_model, zoo  # noqa: E402
from partuner.profile import ProfileStore, profile_model  # noqa: E402
from partuner.units import units_from_mapping  # noqa: E402

UNITS = {
    "units": {
        "cpu0": {"backend": "onnxruntime", "threads": 1},
        "cpu1": {"backend": "onnxruntime", "threads": 1},
    }
}
FUSE_MAX = 3


def resnet50(image_size: int, width: float = 1.0, seed: int = 0) -> onnx.ModelProto:
    """A resnet50-shaped model: 7x7 stem, max pool, bottlenecks [3, 4, 6, 3], 1000 classes."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def conv(x: str, c_in: int, c_out: int, k: int, s: int, name: str, relu: bool) -> str:
        w = rng.standard_normal((c_out, c_in, k, k)).astype(np.float32) * (2 / (c_in * k * k))
        inits.append(numpy_helper.from_array(w, f"{name}.w"))
        inits.append(numpy_helper.from_array(np.zeros(c_out, np.float32), f"{name}.b"))
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}.w", f"{name}.b"],
                [f"{name}.y"],
                name=name,
                kernel_shape=[k, k],
                strides=[s, s],
                pads=[k // 2] * 4,
            )
        )
        if not relu:
            return f"{name}.y"
        nodes.append(helper.make_node("Relu", [f"{name}.y"], [f"{name}.r"], name=f"{name}.relu"))
        return f"{name}.r"

    def ch(c: int) -> int:
        return max(int(c * width), 4)

    x = conv("input", 3, ch(64), 7, 2, "stem", True)
    nodes.append(
        helper.make_node(
            "MaxPool",
            [x],
            ["pool.y"],
            name="pool",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1] * 4,
        )
    )
    x, c_in = "pool.y", ch(64)
    for stage, (blocks, mid) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
        for b in range(blocks):
            s = 2 if b == 0 and stage > 0 else 1
            name = f"l{stage + 1}.{b}"
            c_out = ch(mid * 4)
            y = conv(x, c_in, ch(mid), 1, 1, f"{name}.c1", True)
            y = conv(y, ch(mid), ch(mid), 3, s, f"{name}.c2", True)
            y = conv(y, ch(mid), c_out, 1, 1, f"{name}.c3", False)
            short = conv(x, c_in, c_out, 1, s, f"{name}.down", False) if b == 0 else x
            nodes.append(helper.make_node("Add", [y, short], [f"{name}.sum"], name=f"{name}.add"))
            nodes.append(
                helper.make_node("Relu", [f"{name}.sum"], [f"{name}.out"], name=f"{name}.relu")
            )
            x, c_in = f"{name}.out", c_out
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap.y"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap.y"], ["flat.y"], name="flatten"))
    fc = rng.standard_normal((1000, c_in)).astype(np.float32) * (1 / c_in)
    inits.append(numpy_helper.from_array(fc, "fc.w"))
    inits.append(numpy_helper.from_array(np.zeros(1000, np.float32), "fc.b"))
    nodes.append(
        helper.make_node("Gemm", ["flat.y", "fc.w", "fc.b"], ["output"], name="fc", transB=1)
    )
    graph = helper.make_graph(
        nodes,
        "resnet50",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, image_size, image_size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


def bench(label: str, proto: onnx.ModelProto, work: Path, budget: float) -> dict:
    graph = load_model(proto)
    units = units_from_mapping(UNITS)
    db = label.replace("/", "_")
    with ProfileStore(work / f"{db}-plain.db") as store:
        plain = profile_model(graph, units, store=store, budget_s=budget)
    with ProfileStore(work / f"{db}-fused.db") as store:
        cold = profile_model(graph, units, store=store, budget_s=budget, fuse_auto=FUSE_MAX)
        warm = profile_model(graph, units, store=store, budget_s=budget, fuse_auto=FUSE_MAX)
    up = cold.units["cpu0"]
    link = cold.link_fits.get(("cpu0", "cpu1"))
    return {
        "model": label,
        "nodes": len(graph.compute_nodes),
        "signatures": cold.signatures,
        "chain_signatures": cold.group_signatures,
        "groups_kept": cold.groups_kept,
        "cold_no_groups_s": plain.wall_s,
        "cold_s": cold.wall_s,
        "warm_s": warm.wall_s,
        "warm_timed": warm.measured,
        "whole_ms": None if up.whole_us is None else up.whole_us / 1e3,
        "additivity_error_pct": _pct(plain.units["cpu0"].additivity_error),
        "additivity_error_with_groups_pct": _pct(up.fused_additivity_error),
        "additivity_error_in_context_pct": _pct(up.layer_additivity_error),
        "layer_time_mapped_pct": _pct(up.layer_mapped),
        "link_latency_us": None if link is None else link.latency_us,
        "link_gbps": None if link is None or math.isinf(link.gbps) else link.gbps,
    }


def _fmt(v: object, digits: int = 1) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small inputs, short budgets")
    args = ap.parse_args()
    work = temp_dir("partuner-profile-bench-")
    size = 32 if args.quick else 224
    budget = 0.02 if args.quick else 0.25
    models = [(n, zoo.build(n, image_size=size)) for n in ("googlenet", "resnet18", "squeezenet")]
    if args.quick:  # a quarter of the width: the full one's weights make each cut slow
        models.append(("resnet50/4", resnet50(size, width=0.25)))
    elif "resnet50" in zoo.NAMES:
        models.append(("resnet50", zoo.build("resnet50", image_size=size)))
    else:
        models.append(("resnet50", resnet50(size)))
    rows = []
    for label, proto in models:
        rows.append(bench(label, proto, work, budget))
        print(f"done {label}", file=sys.stderr)
    path = write_result(
        "profile",
        {
            "machine": machine(),
            "quick": args.quick,
            "image_size": size,
            "budget_s": budget,
            "fuse_max": FUSE_MAX,
            "units": UNITS["units"],
            "rows": rows,
        },
    )
    cols = [
        ("model", "model"),
        ("nodes", "nodes"),
        ("signatures", "signatures"),
        ("chain_signatures", "chains timed"),
        ("groups_kept", "groups kept"),
        ("cold_no_groups_s", "cold, no groups (s)"),
        ("cold_s", "cold (s)"),
        ("warm_s", "warm (s)"),
        ("additivity_error_pct", "additivity error (%)"),
        ("additivity_error_with_groups_pct", "with groups (%)"),
        ("additivity_error_in_context_pct", "in context (%)"),
        ("layer_time_mapped_pct", "kernel time mapped (%)"),
        ("link_latency_us", "link latency (us)"),
    ]
    print("| " + " | ".join(h for _, h in cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(_fmt(r[k], 2 if k.endswith("_s") else 1) for k, _ in cols) + " |")
    print(f"\nwrote {path}" + (" (quick mode: not for reporting)" if args.quick else ""))


if __name__ == "__main__":
    main()
