"""Profiling on a remote target: write a kit, run it on the board, import its results.

``partuner profile MODEL --kit DIR`` writes (:func:`write_kit`):

- ``models/``: every sub-model to time, as ONNX files: one per distinct node signature, one per
  fused group asked for, the model cut into chunks (``profile/context.py``), a no-op call, and,
  for units that are not in host memory, the device-copy calls of ``profile/transfer.py``;
- ``manifest.json``: the model's digest, each unit's spec, session settings and fingerprint
  fields, and each item's signature, files, input shapes and dtypes, and the units it runs on;
- ``run_profile.py``: a self-contained runner (Python + numpy + onnxruntime or openvino).

``python DIR/run_profile.py`` on the board writes ``DIR/results.json``;
``partuner profile MODEL --import results.json`` loads it into the store
(:func:`import_results`) under the fingerprints the units have *on the board* (computed there by
the same formula as ``Unit.fingerprint``), so a local profile never mistakes them for its own,
and records each unit as a target (``profile/remote.py``): a units file marking the unit
``remote: true`` then plans from these measurements.
A results file for another model (digest) or whose units do not match the units file given is
refused with one line.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from partuner.errors import ProfileError
from partuner.export.cut import cut, cut_nodes
from partuner.graph import ModelGraph
from partuner.profile.context import chain_cuts, chain_detail
from partuner.profile.groups import candidate_groups, group_signature
from partuner.profile.kit_runner import fingerprint as target_fingerprint
from partuner.profile.measure import overhead_model
from partuner.profile.profiler import OVERHEAD_SIG
from partuner.profile.remote import Target, record_target, unit_fields
from partuner.profile.signature import model_digest, node_signature
from partuner.profile.store import Measurement, ProfileStore
from partuner.profile.transfer import LINK_SIZES, combine_link, copy_model, put_rows
from partuner.units import Unit, UnitSet

__all__ = ["KitImport", "import_results", "target_fingerprint", "unit_fields", "write_kit"]

log = logging.getLogger(__name__)

FORMAT = "partuner-kit"
RESULTS_FORMAT = "partuner-kit-results"
VERSION = 1
COPY_SIG = "__copy__#{}"


def _session(unit: Unit) -> dict[str, Any]:
    if unit.backend == "onnxruntime":
        return json.loads(json.dumps(unit.options))
    if unit.backend == "openvino":
        cfg = unit.compile_config()  # type: ignore[attr-defined]
        return {"device": unit.options["device"], "config": json.loads(json.dumps(cfg))}
    raise ProfileError(
        f"unit {unit.name!r} uses backend {unit.backend!r}, which the kit runner cannot run; "
        "kits support onnxruntime and openvino units"
    )


def _inputs(graph: ModelGraph, names: Sequence[str]) -> dict[str, Any]:
    return {
        n: {"shape": list(graph.values[n].shape), "dtype": str(graph.values[n].dtype)}
        for n in names
    }


def write_kit(
    graph: ModelGraph,
    units: UnitSet,
    outdir: str | Path,
    *,
    fuse: Sequence[Sequence[str]] | None = None,
    fuse_auto: int = 0,
    budget_s: float = 0.25,
    link_sizes: Sequence[int] = LINK_SIZES,
) -> Path:
    """Write a profiling kit for ``graph`` on the real units of ``units``; returns the
    manifest's path. Modeled units are left out (nothing to time)."""
    out = Path(outdir)
    real = [u for u in units if not u.modeled]
    if not real:
        raise ProfileError("the units file has no real unit to profile on a target")
    entries = [
        {
            "name": u.name,
            "spec": u.spec(),
            "backend": u.backend,
            "session": _session(u),
            "fields": unit_fields(u),
            "host_memory": u.host_memory,
            "fingerprint_here": u.fingerprint(),
        }
        for u in real
    ]
    (out / "models").mkdir(parents=True, exist_ok=True)
    stale = out / "results.json"  # the earlier kit's results: kept, not taken for this kit's
    if stale.is_file():
        stale.replace(out / "results.earlier.json")
        log.warning(
            "%s held the results of an earlier kit: moved to results.earlier.json, so that "
            "they are not imported as this kit's",
            out,
        )
    items: list[dict[str, Any]] = []

    by_name = {u.name: u for u in real}

    def add(
        sig: str, kind: str, models: list[onnx.ModelProto], inputs: dict, runs: list
    ) -> list[dict[str, Any]]:
        """One item per form of ``models`` the units ``runs`` compile (``Unit.for_ops``)."""
        forms: dict[object, tuple[list[onnx.ModelProto], list[str]]] = {}
        for name in runs:
            unit = by_name.get(name)
            ms = [unit.for_ops(m) for m in models] if unit is not None else models
            key = unit.ops if any(a is not b for a, b in zip(ms, models, strict=True)) else None
            forms.setdefault(key, (ms, []))[1].append(name)
        first = len(items)
        for ms, names in forms.values() if forms else [(models, [])]:
            add_item(sig, kind, ms, inputs, names)
        return items[first:]

    def add_item(
        sig: str, kind: str, models: list[onnx.ModelProto], inputs: dict, runs: list
    ) -> None:
        files = []
        for k, m in enumerate(models):
            rel = f"models/{len(items):04d}{'' if len(models) == 1 else f'_{k}'}.onnx"
            onnx.save(m, out / rel)
            files.append(rel)
        items.append(
            {"signature": sig, "kind": kind, "files": files, "inputs": inputs, "units": runs}
        )

    names = [u.name for u in real]
    add(
        OVERHEAD_SIG,
        "overhead",
        [overhead_model()],
        {"x": {"shape": [1], "dtype": "float32"}},
        names,
    )
    sig_of = {n.name: node_signature(graph, n) for n in graph.compute_nodes}
    seen: set[str] = set()
    for n in graph.compute_nodes:
        sig = sig_of[n.name]
        if sig not in seen:
            seen.add(sig)
            model, ins, _ = cut_nodes(graph, sig.split("#")[0], [n.name])
            runs = [u.name for u in real if u.supports(n, graph)]
            add(sig, "node", [model], _inputs(graph, ins), runs)
    for members, _ in candidate_groups(graph, fuse, fuse_auto):
        sig = group_signature(sig_of[m] for m in members)
        if sig not in seen:
            seen.add(sig)
            model, ins, _ = cut_nodes(graph, "group", members)
            nodes = [graph.node(m) for m in members]
            runs = [u.name for u in real if all(u.supports(x, graph) for x in nodes)]
            add(sig, "group", [model], _inputs(graph, ins), runs)
    whole = [u.name for u in real if all(u.supports(x, graph) for x in graph.compute_nodes)]
    for sig, specs in chain_cuts(graph, model_digest(graph)):
        parts = cut(graph, specs, check=False)
        chain_in = _inputs(graph, graph.inputs)
        for item in add(sig, "chain", [p.model for p in parts], chain_in, whole):
            item["detail"] = chain_detail(graph, parts)
    devices = [u.name for u in real if not u.host_memory]
    for nbytes in link_sizes if devices else ():
        shape = [max(nbytes // 4, 1)]
        inputs = {"x": {"shape": shape, "dtype": "float32"}}
        add(COPY_SIG.format(nbytes), "copy", [copy_model(nbytes)], inputs, devices)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "model": Path(graph.source).name,
        "digest": model_digest(graph),
        "budget_s": budget_s,
        "link_sizes": list(link_sizes),
        "units": entries,
        "items": items,
    }
    path = out / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    shutil.copyfile(Path(__file__).with_name("kit_runner.py"), out / "run_profile.py")
    return path


@dataclass
class KitImport:
    """What :func:`import_results` loaded."""

    host: str
    fingerprints: dict[str, str]  # unit name -> fingerprint on the target
    rows: int = 0
    links: int = 0
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # unit name -> units entry
    sizes: list[int] = field(default_factory=list)  # the link sizes measured


def _measurement(row: list) -> Measurement:
    med, p10, p90, count, status, detail = row
    if status == "failed":  # timing failed on the board: not a verdict, the next kit times it
        return Measurement(math.inf, math.inf, math.inf, 0, "failed", str(detail))
    if status != "ok" or med is None:
        return Measurement(math.inf, math.inf, math.inf, 0, "unsupported", f"refused: {detail}")
    times = [float(med), float(p10), float(p90)]
    bad = next((t for t in times if not (math.isfinite(t) and t >= 0)), None)
    if bad is not None:
        raise ValueError(f"a time of {bad} us, not a finite number >= 0")
    return Measurement(*times, int(count), "ok", str(detail or ""))


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"cannot read kit results {path}: {exc.strerror}") from None
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
        raise ProfileError(f"{path} is not JSON; pass the results.json the kit wrote") from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ProfileError(f"{path} is not a partuner kit results file (run_profile.py output)")
    if data.get("version", 0) > VERSION:
        raise ProfileError(f"{path} has results version {data['version']}; upgrade partuner")
    return data


def import_results(
    store: ProfileStore,
    graph: ModelGraph,
    path: str | Path,
    units: UnitSet | None = None,
) -> KitImport:
    """Load a kit's ``results.json`` into ``store``.

    Raises
    ------
    ProfileError : not a results file, results for another model, a unit whose
        fingerprint does not match (tampered, or ``units`` defines it differently), a unit of
        the results that ``units`` lacks, or no results for a unit of ``units`` (nor any).
    """
    p = Path(path)
    data = _load(p)
    try:  # the file comes from a board: read all of it before anything is stored
        imp, writes = _read_results(p, data, graph, units)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        why = (
            f"it lacks the key {str(exc)[:60]}"
            if isinstance(exc, KeyError)
            else str(exc)[:120]
            if isinstance(exc, ValueError)
            else "a field is not of the type run_profile.py writes"
        )
        raise ProfileError(
            f"{p} is not a well-formed kit results file ({why}); re-run the kit and pass its "
            "results.json"
        ) from None
    for write in writes:
        write(store)
    return imp


def _read_results(
    p: Path, data: dict[str, Any], graph: ModelGraph, units: UnitSet | None
) -> tuple[KitImport, list[Any]]:
    """What a results file holds, and the store writes that import it (none done yet)."""
    from partuner.units.untrusted import check_plan_units

    digest = model_digest(graph)
    if data["digest"] != digest:
        raise ProfileError(
            f"{p} was measured for another model ({data.get('model')}, digest "
            f"{data['digest']}; this model's is {digest}); write a kit for this model"
        )
    host = str(data["host"])
    imp = KitImport(host, {})
    writes: list[Any] = []
    copies: dict[str, dict[int, Measurement] | None] = {}
    sizes = sorted(int(n) for n in data["handoff"])
    imp.sizes = sizes
    for entry in data["units"]:
        name, fp, version = str(entry["name"]), str(entry["fingerprint"]), entry["backend_version"]
        fields = entry["fields"]
        if target_fingerprint(fields, version, host) != fp:
            raise ProfileError(
                f"{p}: unit {name!r} has an inconsistent fingerprint; re-run the kit"
            )
        if units is not None:
            if name not in units:
                raise ProfileError(
                    f"{p} holds measurements of unit {name!r}, which {units.source} does not "
                    f"define (its units: {list(units.units)[:8]}); pass the units file the kit "
                    "was made with"
                )
            local = dict(unit_fields(units[name]))
            if "device_name" in fields["speed"]:
                local["speed"] = dict(local["speed"], device_name=fields["speed"]["device_name"])
            want = target_fingerprint(local, version, host)
            if want != fp:
                raise ProfileError(
                    f"{p} was measured for unit {name!r} with fingerprint {fp}, but unit "
                    f"{name!r} of {units.source} would be {want} there; pass the units file "
                    "the kit was made with"
                )
            imp.specs[name] = units[name].spec()
        else:  # units rebuilt from the file: only those a plan file could define
            imp.specs[name] = _spec_from(fields, entry)
            check_plan_units({name: imp.specs[name]}, str(p), "a kit's results file")
        imp.fingerprints[name] = fp
        target = Target(name, fp, host, version, str(p))
        writes.append(lambda st, t=target, f=fields: record_target(st, t, f))
        desc = f"{name} on {host} (partuner kit, {version})"
        rows = {str(sig): _measurement(r) for sig, r in entry["measurements"].items()}
        if rows and all(m.status == "failed" for m in rows.values()):
            raise ProfileError(
                f"{p}: unit {name!r} failed every item on {host} (the first: "
                f"{next(iter(rows.values())).detail[:320]}); make it run there (its backend, "
                "device, options) and run the kit again, or leave it out (run_profile.py --units)"
            )
        for sig, m in rows.items():
            writes.append(lambda st, fp=fp, sig=sig, m=m, d=desc: st.put(fp, sig, m, description=d))
            imp.rows += 1
        call = rows.get(OVERHEAD_SIG)
        call_us = call.median_us if call is not None and call.status == "ok" else 0.0
        dev = {n: rows.get(COPY_SIG.format(n)) for n in sizes}
        copies[name] = None
        if all(m is not None and m.status == "ok" for m in dev.values()) and dev:
            copies[name] = {
                n: Measurement(
                    max(m.median_us - call_us, 0) / 2,
                    max(m.p10_us - call_us, 0) / 2,
                    max(m.p90_us - call_us, 0) / 2,
                    m.count,
                )
                for n, m in dev.items()
                if m is not None
            }
    ran = ", ".join(imp.fingerprints) or "none"
    lack = [] if units is None else [u.name for u in units if u.name not in imp.fingerprints]
    # units nothing else measures (modeled ones are computed; `remote: true` ones are read
    # from kits imported before) would be timed on this machine, not on the board
    lack = [n for n in lack if not units[n].modeled and units[n].remote is None]  # type: ignore
    if not imp.fingerprints or lack:
        raise ProfileError(
            f"{p} holds no measurements of unit(s) {lack or 'any'} (the kit ran {ran}); run "
            "the kit for them (run_profile.py --units NAMES), leave them out of the units file, "
            "or mark them `remote: true` once their own kit's results are imported"
        )
    hand = {int(n): Measurement(*r[:3], int(r[3])) for n, r in data["handoff"].items()}
    names = list(imp.fingerprints)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            rows = combine_link(hand, copies[a], copies[b])
            pair = (imp.fingerprints[a], imp.fingerprints[b])
            writes.append(lambda st, pair=pair, rows=rows: put_rows(st, *pair, rows))
            imp.links += 1
    return imp, writes


def _spec_from(fields: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    spec = entry.get("spec")
    if isinstance(spec, dict):
        return spec
    return {"backend": fields["backend"]}
