"""``partuner inspect``: what a model holds."""

from __future__ import annotations

from rich.table import Table

from partuner.cli import main
from partuner.cli.common import (
    console,
    emit_json,
    handle_errors,
    input_shape_option,
    json_option,
    load_graph,
    model_argument,
)
from partuner.graph import parallel_branch_groups


@main.command("inspect")
@model_argument
@input_shape_option
@json_option
@handle_errors
def inspect_cmd(model: str, input_shapes: tuple[str, ...], as_json: bool) -> None:
    """Op histogram, sizes, FLOPs, weights and parallel branch groups of MODEL."""
    g = load_graph(model, input_shapes)
    groups = parallel_branch_groups(g)
    info = {
        "model": g.source,
        "nodes": len(g.nodes),
        "compute_nodes": len(g.compute_nodes),
        "values": len(g.values),
        "inputs": {
            k: {"shape": list(g.values[k].shape), "dtype": g.values[k].dtype} for k in g.inputs
        },
        "outputs": {
            k: {"shape": list(g.values[k].shape), "dtype": g.values[k].dtype} for k in g.outputs
        },
        "gflops": g.total_flops / 1e9,
        "weights_mb": g.weight_bytes / 1e6,
        "op_histogram": g.op_histogram(),
        "branch_groups": [
            {"fork": b.fork, "join": b.join, "branches": [list(x) for x in b.branches]}
            for b in groups
        ],
    }
    if as_json:
        emit_json(info)
        return
    console.print(
        f"[bold]{g.source}[/bold]: {len(g.nodes)} nodes "
        f"({len(g.compute_nodes)} to place), {len(g.values)} values, "
        f"{info['gflops']:.3f} GFLOPs, {info['weights_mb']:.2f} MB of weights"
    )
    for k, v in info["inputs"].items():
        console.print(f"  input  {k}: {v['dtype']} {v['shape']}")
    for k, v in info["outputs"].items():
        console.print(f"  output {k}: {v['dtype']} {v['shape']}")
    t = Table(title="operators", show_edge=False)
    t.add_column("op")
    t.add_column("count", justify="right")
    for op, n in g.op_histogram().items():
        t.add_row(op, str(n))
    console.print(t)
    console.print(f"parallel branch groups: {len(groups)}")
    for i, b in enumerate(groups):
        lens = ", ".join(str(len(x)) for x in b.branches)
        console.print(
            f"  {i}: fork {b.fork or '(inputs)'} -> join {b.join}: "
            f"{len(b.branches)} branches of {lens} nodes"
        )
