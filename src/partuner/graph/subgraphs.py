"""Sub-graphs (``If`` branches, ``Loop`` and ``Scan`` bodies): walking them, and the values a
node reads through them.

A sub-graph may read any value of the graphs around it by name, without listing it among the
node's inputs. Such a value is an *implicit input* of the node: the node must run after the
value's producer, and a sub-model holding the node but not the producer must take the value as
an input. :func:`outer_names` lists them for one node, for the graph's def-use links
(``graph/model.py``) and for cutting (``export/cut.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

__all__ = ["all_graphs", "outer_names"]


def all_graphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``g`` and every sub-graph nested in its nodes' attributes, outermost first."""
    yield g
    for node in g.node:
        for a in node.attribute:
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                yield from all_graphs(sub)


def outer_names(node: onnx.NodeProto) -> list[str]:
    """The values ``node``'s sub-graphs read from the graphs around it, in first-use order;
    empty for a node without sub-graphs.

    Examples
    --------
    >>> from onnx import helper
    >>> body = helper.make_graph([helper.make_node("Relu", ["c"], ["o"])], "b", [], [])
    >>> n = helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body)
    >>> outer_names(n)
    ['c']
    """
    found: list[str] = []
    for a in node.attribute:
        for sub in [a.g] if a.HasField("g") else list(a.graphs):
            for name in _reads(sub, set()):
                if name not in found:
                    found.append(name)
    return found


def _reads(g: onnx.GraphProto, bound: set[str]) -> list[str]:
    """The names ``g``'s nodes (and their sub-graphs) read that neither ``g`` nor the graphs
    between it and the node define (``bound``)."""
    mine = set(bound)
    mine.update(i.name for i in g.input)
    mine.update(t.name for t in g.initializer)
    mine.update(t.name for t in g.sparse_initializer)
    out: list[str] = []
    for n in g.node:
        for x in n.input:
            if x and x not in mine and x not in out:
                out.append(x)
        for a in n.attribute:
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                for x in _reads(sub, mine):
                    if x not in out:
                        out.append(x)
        mine.update(o for o in n.output if o)
    return out
