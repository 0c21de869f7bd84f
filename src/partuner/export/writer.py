"""Write a plan's partitions to a folder: one ONNX file per partition, a manifest, the plan.

    OUTDIR/
      plan.yaml          NEST-C keys + partuner's section (export/planfile.py)
      manifest.json      partitions, units, boundary values (shape, dtype), who feeds whom
      partitions/p0.onnx one standalone model per partition (onnx.checker passes on each)

Everything is first written to a temporary folder beside OUTDIR, then moved in, so an error
leaves no half-written files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import onnx
import yaml

from partuner.export.cut import PartitionModel, cut, partition_order
from partuner.export.planfile import PlanFile, plan_to_dict
from partuner.graph import ModelGraph

__all__ = ["export_plan", "manifest"]


def manifest(graph: ModelGraph, plan: PlanFile, parts: list[PartitionModel]) -> dict[str, Any]:
    """The manifest of an exported plan (JSON-serialisable)."""
    deps = partition_order(graph, [(p.name, p.nodes) for p in parts])

    def io(names: list[str]) -> list[dict[str, Any]]:
        return [
            {"name": v, "dtype": graph.values[v].dtype, "shape": list(graph.values[v].shape)}
            for v in names
        ]

    return {
        "model": plan.model,
        "input_shapes": plan.input_shapes,
        "inputs": io(list(graph.inputs)),
        "outputs": io(list(graph.outputs)),
        "parallel_groups": plan.parallel,
        "partitions": [
            {
                "name": p.name,
                "unit": p.unit,
                "file": f"partitions/{p.name}.onnx",
                "nodes": len(p.nodes),
                "inputs": io(p.inputs),
                "outputs": io(p.outputs),
                "after": sorted(deps[p.name]),
            }
            for p in parts
        ],
    }


def export_plan(graph: ModelGraph, plan: PlanFile, outdir: str | Path) -> list[PartitionModel]:
    """Cut ``graph`` along ``plan`` and write the partitions, manifest and plan to ``outdir``."""
    parts = cut(graph, plan.partitions)
    outdir = Path(outdir)
    outdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=outdir.parent, prefix=f".{outdir.name}."))
    try:
        (tmp / "partitions").mkdir()
        for p in parts:
            onnx.save_model(p.model, tmp / "partitions" / f"{p.name}.onnx")
        (tmp / "manifest.json").write_text(json.dumps(manifest(graph, plan, parts), indent=2))
        (tmp / "plan.yaml").write_text(
            yaml.safe_dump(plan_to_dict(plan), sort_keys=False, width=100)
        )
        if not outdir.exists():
            os.replace(tmp, outdir)
        else:
            old_parts = outdir / "partitions"
            if old_parts.exists():
                shutil.rmtree(old_parts)
            for item in tmp.iterdir():
                os.replace(item, outdir / item.name)
            tmp.rmdir()
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return parts
