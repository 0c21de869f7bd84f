"""Write a plan's partitions to a folder: one ONNX file per partition, a manifest, the plan.

    OUTDIR/
      plan.yaml          NEST-C keys + partuner's section (export/planfile.py)
      manifest.json      partitions, units, boundary values (shape, dtype), who feeds whom
      partitions/p0.onnx one standalone model per partition (onnx.checker passes on each)

Everything is first written to a temporary folder beside OUTDIR, then moved in, so an error
leaves no half-written files. Into an existing OUTDIR, only the partition files the previous
export wrote (its manifest lists them) are replaced or removed; other files are the user's and
stay. Partition names are checked to be safe file names before any work.
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

from partuner.errors import PartunerError
from partuner.export.cut import PartitionModel, cut, for_unit_ops, partition_order
from partuner.export.planfile import (
    PlanFile,
    check_partition_names,
    default_mode,
    is_safe_name,
    plan_to_dict,
)
from partuner.graph import ModelGraph

__all__ = ["export_plan", "manifest", "check_outdir", "temp_folder", "move_into"]


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
    outdir = Path(outdir)
    check_outdir(plan, outdir)
    parts = for_unit_ops(cut(graph, plan.partitions), plan.units)
    tmp = temp_folder(outdir)
    try:
        for p in parts:
            onnx.save_model(p.model, tmp / "partitions" / f"{p.name}.onnx")
        (tmp / "manifest.json").write_text(json.dumps(manifest(graph, plan, parts), indent=2))
        (tmp / "plan.yaml").write_text(
            yaml.safe_dump(plan_to_dict(plan), sort_keys=False, width=100)
        )
        move_into(tmp, outdir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return parts


def check_outdir(plan: PlanFile, outdir: Path) -> None:
    """Before any work: the partition names are safe file names, and ``outdir`` and its
    ``partitions`` are folders (not files, not links to elsewhere)."""
    check_partition_names([p.name for p in plan.partitions], plan.source or "the plan")
    if outdir.exists() and not outdir.is_dir():
        raise PartunerError(f"output {outdir} is a file, not a folder; choose another -o")
    sub = outdir / "partitions"
    if sub.is_symlink() or (sub.exists() and not sub.is_dir()):
        raise PartunerError(
            f"{sub} is a link or a file, not the folder partuner writes; move it away or "
            "choose another -o"
        )


def temp_folder(outdir: Path) -> Path:
    """A new folder beside ``outdir`` (same file system) with an empty ``partitions``, both with
    the modes ``mkdir`` gives under the umask, to fill and then :func:`move_into` place."""
    outdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=outdir.parent, prefix=f".{outdir.name}."))
    default_mode(tmp)
    (tmp / "partitions").mkdir()
    return tmp


def _previous_files(outdir: Path) -> set[str]:
    """The partition files the export already in ``outdir`` wrote, by its manifest.

    The manifest is untrusted: only names partuner would have written for a safe partition name
    (``partitions/NAME.onnx``, ``partitions/NAME.onnx.data``) count; anything unreadable counts
    as nothing."""
    try:
        entries = json.loads((outdir / "manifest.json").read_text(encoding="utf-8"))["partitions"]
    except (OSError, ValueError, RecursionError, KeyError, TypeError, IndexError):
        return set()
    found: set[str] = set()
    for e in entries if isinstance(entries, list) else []:
        name = e.get("name") if isinstance(e, dict) else None
        if not is_safe_name(name):
            continue
        for key, suffix in (("file", ".onnx"), ("external_data", ".onnx.data")):
            if e.get(key) == f"partitions/{name}{suffix}":
                found.add(f"{name}{suffix}")
    return found


def move_into(tmp: Path, outdir: Path) -> None:
    """Move the folder ``tmp`` (``partitions/``, ``manifest.json``, ``plan.yaml``) to ``outdir``.

    Into an existing ``outdir``, the new files replace those of the same name and then the
    partition files the previous export wrote (its manifest says which) are removed; any other
    file in ``outdir`` or ``outdir/partitions`` (the user's) is kept."""
    if not outdir.exists():
        os.replace(tmp, outdir)
        return
    stale = _previous_files(outdir)
    sub = outdir / "partitions"
    if not sub.is_dir():
        os.replace(tmp / "partitions", sub)
        new: set[str] = set()
    else:
        new = {f.name for f in (tmp / "partitions").iterdir()}
        for name in new:
            os.replace(tmp / "partitions" / name, sub / name)
        (tmp / "partitions").rmdir()
    for item in tmp.iterdir():
        os.replace(item, outdir / item.name)
    tmp.rmdir()
    for name in sorted(stale - new):
        old = sub / name
        if old.is_file() and not old.is_symlink():
            old.unlink()
