"""The remote-profiling kit: what it holds, the runner's loop on this machine, importing its
results, and refusing results for another model or another unit."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from partuner.cli import main
from partuner.errors import ProfileError
from partuner.graph import load_model, zoo
from partuner.profile import ProfileStore, find_chains, model_digest, node_signature, profile_model
from partuner.profile.context import chain_cuts
from partuner.profile.kit import import_results, target_fingerprint, unit_fields, write_kit
from partuner.profile.transfer import link_signature
from partuner.units import host_cpu_model, load_units, units_from_mapping

UNITS = {"units": {"cpu0": {"backend": "onnxruntime"}, "ov": {"backend": "openvino"}}}
SIZES = (4096, 1 << 20)


def _units():
    us = units_from_mapping(UNITS)
    if not us["ov"].availability()[0]:
        us = units_from_mapping({"units": {"cpu0": UNITS["units"]["cpu0"]}})
    return us


def test_fingerprint_formula_matches_the_units():
    for unit in _units():
        fields = unit_fields(unit)
        assert target_fingerprint(fields, unit.backend_version(), host_cpu_model()) == (
            unit.fingerprint()
        )


def test_kit_holds_every_sub_model_and_a_standalone_runner(branchy, tmp_path):
    units = _units()
    manifest = write_kit(branchy, units, tmp_path, fuse=[["Conv", "Relu"]], link_sizes=SIZES)
    data = json.loads(manifest.read_text())
    assert data["digest"] == model_digest(branchy)
    assert [u["name"] for u in data["units"]] == list(units.units)
    kinds: dict[str, list[str]] = {}
    for item in data["items"]:
        kinds.setdefault(item["kind"], []).append(item["signature"])
        for f in item["files"]:
            assert (tmp_path / f).is_file()
        assert set(item["units"]) <= set(units.units)
    node_sigs = {node_signature(branchy, n) for n in branchy.compute_nodes}
    assert set(kinds["node"]) == node_sigs and len(kinds["node"]) == len(node_sigs)
    n_groups = len(
        {
            "+".join(node_signature(branchy, branchy.node(m)) for m in c)
            for c in find_chains(branchy, ["Conv", "Relu"])
        }
    )
    assert len(kinds["group"]) == n_groups
    assert kinds["chain"] == [s for s, _ in chain_cuts(branchy, model_digest(branchy))]
    assert kinds["overhead"] == ["__call_overhead__"]
    assert "copy" not in kinds  # every unit computes in host memory
    runner = (tmp_path / "run_profile.py").read_text()
    assert not re.search(r"^\s*(from|import) partuner", runner, re.M)


def test_modeled_only_units_cannot_make_a_kit(branchy, tmp_path):
    units = units_from_mapping({"units": {"npu": {"backend": "modeled", "gflops": 10, "gbps": 8}}})
    with pytest.raises(ProfileError, match="no real unit"):
        write_kit(branchy, units, tmp_path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A kit for branchy, run by its own runner in a fresh Python process."""
    graph = load_model(zoo.build("branchy", image_size=32))
    kit = tmp_path_factory.mktemp("kit")
    write_kit(graph, _units(), kit, fuse=[["Conv", "Relu"]], budget_s=0.01, link_sizes=SIZES)
    script = str(kit / "run_profile.py")
    # partuner made unimportable: the runner must stand alone
    code = (
        "import runpy, sys; sys.modules['partuner'] = None; "
        f"sys.argv = [{script!r}, '--quiet']; runpy.run_path({script!r}, run_name='__main__')"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return kit / "results.json"


def test_runner_results_import_and_profile_from_the_store(branchy, results, tmp_path):
    units = _units()
    data = json.loads(results.read_text())
    for entry in data["units"]:  # same machine: same fingerprints as here
        assert entry["fingerprint"] == units[entry["name"]].fingerprint()
    with ProfileStore(tmp_path / "p.db") as store:
        imp = import_results(store, branchy, results, units)
        assert imp.fingerprints == {u.name: u.fingerprint() for u in units}
        assert imp.rows == sum(len(e["measurements"]) for e in data["units"])
        fps = list(imp.fingerprints.values())
        for i, a in enumerate(fps):
            for b in fps[i + 1 :]:
                assert store.get(*link_signature(a, b, SIZES[0])) is not None
        prof = profile_model(
            branchy,
            units,
            store=store,
            remote=imp.fingerprints,
            fuse=[["Conv", "Relu"]],
            link_sizes=SIZES,
        )
    assert prof.measured == 0 and prof.links_measured == 0  # everything came from the kit
    assert prof.remote == imp.fingerprints
    assert [m for m, _ in prof.groups] == find_chains(branchy, ["Conv", "Relu"])
    for name in units.units:
        up = prof.units[name]
        assert up.whole_us is not None and up.call_us > 0  # chains and no-op call came along
        total = up.overhead_us + sum(prof.costs[n.name][name] for n in branchy.compute_nodes)
        assert total >= up.whole_us - 1e-6  # fused groups only take savings off
    assert set(prof.link_sources.values()) <= {"measured"}


def test_results_for_another_model_or_unit_are_refused(branchy, results, tmp_path):
    other = load_model(zoo.build("branchy", image_size=48))
    with ProfileStore(tmp_path / "p.db") as store:
        with pytest.raises(ProfileError, match="another model"):
            import_results(store, other, results)
        changed = load_units_text(tmp_path, "cpu0: {backend: onnxruntime, threads: 2}")
        with pytest.raises(ProfileError, match="units file the kit was made with"):
            import_results(store, branchy, results, changed)
        missing = load_units_text(tmp_path, "gpu0: {backend: onnxruntime}")
        with pytest.raises(ProfileError, match="unit 'cpu0', which .* does not define"):
            import_results(store, branchy, results, missing)
        data = json.loads(results.read_text())
        data["units"][0]["fingerprint"] = "onnxruntime-0-cpu-t1-f32-000000000000"
        forged = tmp_path / "forged.json"
        forged.write_text(json.dumps(data))
        with pytest.raises(ProfileError, match="inconsistent fingerprint"):
            import_results(store, branchy, forged)
        (tmp_path / "junk.json").write_text("{}")
        with pytest.raises(ProfileError, match="not a partuner kit results"):
            import_results(store, branchy, tmp_path / "junk.json")


def load_units_text(tmp_path, entry: str):
    p = tmp_path / "u.yaml"
    p.write_text(f"units:\n  {entry}\n")
    return load_units(p)


def test_remote_units_without_measurements_are_named(branchy, tmp_path):
    units = units_from_mapping({"units": {"cpu0": {"backend": "onnxruntime"}}})
    with ProfileStore(tmp_path / "p.db") as store, pytest.raises(ProfileError, match="'cpu0'"):
        profile_model(branchy, units, store=store, remote={"cpu0": "board-fp"})


def test_cli_kit_loop(branchy_file, results, tmp_path):
    kit = tmp_path / "kit"
    u = tmp_path / "u.yaml"
    u.write_text("units:\n  cpu0: {backend: onnxruntime}\n")
    r = CliRunner().invoke(
        main, ["profile", str(branchy_file), "--units", str(u), "--kit", str(kit), "--json"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["units"] == ["cpu0"] and out["items"]["node"] > 0
    assert (kit / "run_profile.py").is_file() and (kit / "manifest.json").is_file()
    db = str(tmp_path / "p.db")
    r = CliRunner().invoke(
        main, ["profile", str(branchy_file), "--import", str(results)] + ["--db", db, "--json"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out["remote"]) == set(_units().units) and out["measured"] == 0
    assert all(link["source"] == "measured" and link["points"] for link in out["links"])
    other = tmp_path / "other.onnx"
    zoo.save("branchy", other, image_size=48)
    r = CliRunner().invoke(main, ["profile", str(other), "--import", str(results), "--db", db])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "another model" in lines[0]


def test_units_shows_the_link_a_kit_measured_between_remote_units(branchy_file, results, tmp_path):
    db = str(tmp_path / "p.db")
    args = ["profile", str(branchy_file), "--import", str(results), "--db", db]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    u = tmp_path / "remote.yaml"
    u.write_text(
        "units:\n  cpu0: {backend: onnxruntime, remote: true}\n"
        "  ov: {backend: openvino, remote: true}\n"
    )
    r = CliRunner().invoke(main, ["units", "--units", str(u), "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    (link,) = json.loads(r.output)["links"]
    assert link["measured"] and not link["declared"]
    r = CliRunner().invoke(main, ["units", "--units", str(u), "--db", db])
    assert "measured by an earlier profiling run, as stored" in r.output
    r = CliRunner().invoke(main, ["units", "--units", str(u), "--db", str(tmp_path / "none.db")])
    assert r.exit_code == 0 and "default link" in r.output  # nothing imported there


@pytest.mark.filterwarnings("ignore:Specified provider")
def test_runner_times_nothing_on_the_cpu_for_a_provider_it_cannot_set_up(tmp_path):
    """On a board whose onnxruntime cannot set up the unit's provider (CUDA here, where the
    onnxruntime installed has none), onnxruntime would run on the CPU: the kit's runner marks
    the item failed with the reason instead of storing CPU timings as the GPU's."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    from partuner.profile.kit_runner import Backend, run_item

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime offers CUDA")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save_model(model, tmp_path / "m.onnx")
    session = {"threads": 1, "optimization": "all", "spinning": False, "session_options": {}}
    gpu = {"name": "g", "backend": "onnxruntime"}
    gpu["session"] = {**session, "provider": "CUDAExecutionProvider", "precision": "tf32"}
    item = {"files": ["m.onnx"], "inputs": {"x": {"shape": [1, 4], "dtype": "float32"}}}
    got = run_item(Backend(gpu), tmp_path, item, 0.05)
    assert got[3:5] == [0, "failed"]
    assert "could not set up CUDAExecutionProvider" in got[5]
    cpu = {"name": "c", "backend": "onnxruntime"}
    cpu["session"] = {**session, "provider": "CPUExecutionProvider"}
    assert run_item(Backend(cpu), tmp_path, item, 0.05)[4] == "ok"


def test_results_lacking_units_are_refused_not_timed_here(branchy, results, tmp_path):
    """A kit run for no unit (a misspelt `--units`), or for some of the units file's only:
    import refused, nothing stored (the units left out were timed on this machine)."""
    data = json.loads(results.read_text())
    some = tmp_path / "some.json"
    cpu0 = [u for u in data["units"] if u["name"] == "cpu0"]
    some.write_text(json.dumps({**data, "units": cpu0}))
    more = {"units": {"cpu0": UNITS["units"]["cpu0"], "cpu1": {"backend": "onnxruntime"}}}
    none = tmp_path / "none.json"
    none.write_text(json.dumps({**data, "units": []}))
    bad = json.loads(results.read_text())
    first = next(iter(bad["units"][0]["measurements"]))
    bad["units"][0]["measurements"][first] = [-5.0, 1.0, 2.0, 3, "ok", ""]
    (tmp_path / "neg.json").write_text(json.dumps(bad))
    (tmp_path / "null.json").write_text(json.dumps({**data, "units": [None]}))
    dead = json.loads(results.read_text())  # a unit that could run nothing on the board
    why = "RuntimeError: Cannot load library libopenvino_intel_gpu_plugin.so"
    for sig in dead["units"][0]["measurements"]:
        dead["units"][0]["measurements"][sig] = [None, None, None, 0, "failed", why]
    (tmp_path / "dead.json").write_text(json.dumps(dead))
    db = tmp_path / "p.db"
    with ProfileStore(db) as store:
        with pytest.raises(ProfileError, match=r"no measurements of unit\(s\) \['cpu1'\]"):
            import_results(store, branchy, some, units_from_mapping(more))
        with pytest.raises(ProfileError, match="no measurements of unit.* any .*kit ran none"):
            import_results(store, branchy, none)
        with pytest.raises(ProfileError, match=r"a time of -5.0 us, not a finite number >= 0\)"):
            import_results(store, branchy, tmp_path / "neg.json")
        with pytest.raises(ProfileError, match="a field is not of the type run_profile.py"):
            import_results(store, branchy, tmp_path / "null.json")
        with pytest.raises(ProfileError, match=f"failed every item on .* \\(the first: {why}\\)"):
            import_results(store, branchy, tmp_path / "dead.json")
        assert store.summary() == []
        # a unit marked remote is read from a kit imported before (another board's): allowed
        more["units"]["cpu1"]["remote"] = True
        assert import_results(store, branchy, some, units_from_mapping(more)).rows > 0


@pytest.mark.parametrize(
    "args, said",
    [
        (["--kit", "nokit"], "no kit at nokit (it holds no manifest.json)"),
        (["--units", "nope"], "--units names ['nope'], not units of this kit"),
        (["--budget", "-1"], "--budget must be a number of seconds > 0, got -1.0"),
    ],
)
def test_runner_refuses_a_wrong_argument_in_one_line(results, tmp_path, args, said):
    script = results.parent / "run_profile.py"
    r = subprocess.run(
        [sys.executable, str(script), *args, "--out", str(tmp_path / "r.json")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("run_profile.py: error: ") and said in line, line
    assert not (tmp_path / "r.json").exists()


def test_a_kit_written_again_sets_the_earlier_results_aside(branchy, tmp_path, caplog):
    """Writing a kit into a folder holding an earlier kit's results.json left it there, to be
    imported as the new kit's (a new user's trial)."""
    (tmp_path / "results.json").write_text('{"earlier": true}')
    with caplog.at_level("WARNING", logger="partuner"):
        write_kit(branchy, _units(), tmp_path, budget_s=0.01, link_sizes=SIZES)
    assert not (tmp_path / "results.json").exists()
    assert (tmp_path / "results.earlier.json").read_text() == '{"earlier": true}'
    assert "moved to results.earlier.json" in caplog.text
