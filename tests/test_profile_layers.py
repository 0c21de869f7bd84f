"""In-context node costs: per-layer profiles of a whole-model run mapped back to ONNX nodes."""

from __future__ import annotations

import json
import math

import pytest

from partuner.graph import load_model, zoo
from partuner.profile import ProfileStore, profile_model
from partuner.profile.layers import map_layers, read_layers
from partuner.profile.measure import random_feeds
from partuner.units import OnnxruntimeUnit, load_units
from partuner.units.onnxruntime_unit import kernel_times


def test_kernels_map_by_node_name_value_name_and_fused_neighbours(squeeze):
    kernels = [
        (("features.1_output_nchwc", "features.1_output"), 90.0),  # Conv+Relu, named by value
        (("features.2",), 5.0),  # by node name
        (("features.3.squeeze/WithoutBiases", "features.3.squeeze", "x"), 12.0),  # OpenVINO
        (("ReorderOutput",), 7.0),  # names no node
    ]
    weight = {"features.0": 80.0, "features.1": 10.0, "features.3.squeeze": 3.0}
    m = map_layers(squeeze, kernels, weight)
    # the Conv is fused into the Relu's kernel: the kernel is shared by isolated time
    assert m.costs["features.0"] == pytest.approx(80.0)
    assert m.costs["features.1"] == pytest.approx(10.0)
    assert m.costs["features.2"] == pytest.approx(5.0)
    # the squeeze's Relu has no kernel of its own: it joins its chain neighbour's and, with no
    # weight of its own, counts as the mean of the others' (here: an equal split)
    assert m.costs["features.3.squeeze"] + m.costs["features.3.squeeze_activation"] == 12.0
    assert m.mapped_us == 107.0 and m.unmapped_us == 7.0 and m.total_us == 114.0
    assert m.kernels == 4


def test_a_node_timed_at_zero_gets_none_of_a_fused_kernel(squeeze):
    """A Relu's isolated time less the call's is 0 where the call costs more than the Relu:
    it gets none of its Conv+Relu kernel (an equal split gave it half the convolution's time,
    and plans that moved the Relu away were predicted faster than they ran); a node with no
    weight at all counts as the mean of the kernel's others."""
    fused = (("features.1_output_nchwc", "features.1_output"), 2400.0)
    rest = [((n.name,), 1.0) for n in squeeze.compute_nodes[2:]]  # each has its own kernel
    m = map_layers(squeeze, [fused, *rest], {"features.0": 2300.0, "features.1": 0.0})
    assert (m.costs["features.0"], m.costs["features.1"]) == (2400.0, 0.0)
    m = map_layers(squeeze, [fused, *rest], {"features.0": 2300.0})
    assert m.costs["features.0"] == m.costs["features.1"] == 1200.0
    m = map_layers(squeeze, [fused, *rest], {"features.0": 0.0, "features.1": 0.0})
    assert m.costs["features.0"] == m.costs["features.1"] == 1200.0


def test_a_kernel_named_by_several_layers_is_shared():
    g = load_model(zoo.build("branchy", image_size=32))
    a, b = (n.name for n in g.compute_nodes[:2])
    rest = [((n.name,), 1.0) for n in g.compute_nodes[2:]]
    m = map_layers(g, [((a, b), 30.0), *rest], {a: 1.0, b: 2.0})
    assert m.costs[a] == pytest.approx(10.0) and m.costs[b] == pytest.approx(20.0)


def test_onnxruntime_trace_parsing():
    events = [
        {"cat": "Session", "name": "model_run", "dur": 100},
        {"cat": "Node", "name": "conv_fence_before", "dur": 1},
        {"cat": "Node", "name": "conv_kernel_time", "dur": 10},
        {"cat": "Node", "name": "conv_kernel_time", "dur": 30},
        {"cat": "Node", "name": "conv_kernel_time", "dur": 12},
        {"cat": "Node", "name": "y_nchwc_kernel_time", "dur": 4},
    ]
    assert kernel_times(events) == [(("conv",), 12.0), (("y_nchwc", "y"), 4.0)]


def test_onnxruntime_layer_times_cover_the_model(squeeze):
    unit = OnnxruntimeUnit("cpu0")
    kernels = unit.layer_times(squeeze.model, random_feeds(squeeze, list(squeeze.inputs)), runs=3)
    assert kernels and all(t >= 0 for _, t in kernels)
    m = map_layers(squeeze, kernels, {})
    assert set(m.costs) == {n.name for n in squeeze.compute_nodes}
    assert m.mapped_us > 0.8 * m.total_us


def test_openvino_layer_times_cover_the_model(squeeze):
    pytest.importorskip("openvino")
    from partuner.units import OpenvinoUnit

    unit = OpenvinoUnit("ov")
    if not unit.availability()[0]:
        pytest.skip(unit.availability()[1])
    kernels = unit.layer_times(squeeze.model, random_feeds(squeeze, list(squeeze.inputs)), runs=3)
    m = map_layers(squeeze, kernels, {})
    convs = {n.name for n in squeeze.compute_nodes if n.op_type == "Conv"}
    assert convs <= set(m.costs)
    assert m.mapped_us > 0.5 * m.total_us


def test_profile_costs_in_context_add_up_to_the_whole(squeeze, tmp_path):
    path = tmp_path / "units.yaml"
    path.write_text("units:\n  cpu0: {backend: onnxruntime}\n")
    units = load_units(path)
    prof = profile_model(squeeze, units, budget_s=0.02)
    up = prof.units["cpu0"]
    assert up.costs_from == "layers" and up.layer_mapped > 0.8
    assert up.layer_additivity_error is not None and math.isfinite(up.layer_additivity_error)
    total = up.overhead_us + sum(prof.costs[n.name]["cpu0"] for n in squeeze.compute_nodes)
    assert total == pytest.approx(up.whole_us)
    off = profile_model(squeeze, units, budget_s=0.02, layers=False).units["cpu0"]
    assert off.costs_from == "isolated" and off.layer_additivity_error is None


def test_backend_suffixes_resolve_to_the_node(squeeze):
    kernels = [(("features.0/WithoutBiases",), 50.0), (("features.0/x/y/z",), 1.0)]
    m = map_layers(squeeze, kernels, {})
    assert "features.0" in m.costs and m.mapped_us == 50.0
    assert m.unmapped_us == 1.0  # the too-deep name is not guessed at


def test_a_conversion_between_layers_maps_to_the_node_it_feeds(squeeze):
    # OpenVINO names the reorders it inserts <from>_<formats>_<to>
    kernels = [
        (("features.0_abcd_acdb_features.1",), 4.0),
        (("features.1_bf16_acdb_f32_aBcd16b_features.2",), 2.0),
        (("features.2_output_acdb_abcd_features.2_output/sink_port_0",), 3.0),  # writes out
        (("features.0_abcd_features.1_x_features.2",), 1.0),  # a name between: not one
        (("features.0_abcd_acdb_features.1/" + "x" * 1100,), 0.5),  # too long to take apart
    ]
    m = map_layers(squeeze, kernels, {})
    assert m.mapped_us == 6.0 and m.unmapped_us == 4.5 and m.writes_us == 3.0
    # the Conv before the Relu has no kernel of its own and joins the Relu's (as fused)
    assert m.costs["features.0"] + m.costs["features.1"] == pytest.approx(4.0)
    assert m.costs["features.2"] < 2.0 < sum(m.costs.values()) - 4.0 + 1e-9


def test_a_profile_that_maps_poorly_falls_back_to_isolated_costs(squeeze, tmp_path, monkeypatch):
    def unmappable(self, model, feeds, runs=20):
        return [(("mystery",), 500.0), (("features.0",), 10.0)], None

    monkeypatch.setattr(OnnxruntimeUnit, "layer_profile", unmappable)
    path = tmp_path / "units.yaml"
    path.write_text("units:\n  cpu0: {backend: onnxruntime}\n")
    prof = profile_model(squeeze, load_units(path), budget_s=0.02)
    assert prof.units["cpu0"].costs_from == "isolated"


def test_the_in_context_error_compares_the_kernels_with_their_own_runs(squeeze, tmp_path):
    # the whole-model time anchoring the costs is taken at another moment than the per-layer
    # profile: on a drifting machine the two differ by a fifth, which is not what the kernels
    # leave out; the error compares the kernels with the runs they came from
    path = tmp_path / "units.yaml"
    path.write_text("units:\n  cpu0: {backend: onnxruntime, threads: 1}\n")
    with ProfileStore(tmp_path / "p.db") as store:
        up = profile_model(squeeze, load_units(path), store=store, budget_s=0.02).units["cpu0"]
        rows = store._db.execute(  # noqa: SLF001 - the test reads the store's rows directly
            "SELECT signature FROM measurements WHERE signature LIKE '\\_\\_layers\\_\\_#%' "
            "ESCAPE '\\'"
        )
        sig = next(r[0] for r in rows.fetchall())
        row = store.get(up.fingerprint, sig)
    kernels, wall = read_layers(row.detail)
    assert up.layer_wall_us == wall and wall > 0
    assert up.layer_parts_us == pytest.approx(up.call_us + sum(t for _, t in kernels))
    assert up.layer_additivity_error == pytest.approx(up.layer_parts_us / wall - 1)
    # a row stored by the last version (kernels alone) still reads, against the whole model
    assert read_layers(json.dumps([[list(k), t] for k, t in kernels])) == (kernels, None)


def test_openvino_cpu_counters_are_read_as_averages_since_compiling(squeeze, monkeypatch):
    # OpenVINO's CPU plugin reports each layer's average over every run since compiling (whole
    # µs): the first, cold run must not count, nor hide in the warm runs' average
    pytest.importorskip("openvino")
    from partuner.units import OpenvinoUnit, openvino_unit

    unit = OpenvinoUnit("ov")
    if not unit.availability()[0]:
        pytest.skip(unit.availability()[1])

    class CountingRunner:  # what the CPU plugin reports, without timing anything
        def __init__(self, model, **kwargs):
            self.runs, self.total = 0, {"conv": 0, "relu": 0}

        def layer_names(self):
            return {"conv": ("features.0",), "relu": ("features.1",)}

        def run(self, feeds):
            self.runs += 1
            self.total["conv"] += 500 if self.runs == 1 else 100 + self.runs % 3

        def profiling_info(self):
            return [(k, float(t // self.runs)) for k, t in self.total.items()]

        def close(self):
            pass

    monkeypatch.setattr(openvino_unit, "OpenvinoRunner", CountingRunner)
    kernels, wall = unit.layer_profile(squeeze.model, {}, runs=20)
    got = dict(kernels)
    assert got[("features.0",)] == pytest.approx(101.0, abs=1.0)  # runs 6-20: 100-102 µs
    assert got[("features.1",)] == 0.0  # fused away, never run
    assert wall is not None
