"""Zoo builders for the synthetic graphs: branchy (small) and synthetic_large (1000+ nodes).

Each function takes a :class:`~partuner.graph.zoo_builder.Builder` and returns the output value's
name; :func:`partuner.graph.zoo.build` is the entry point.
"""

from __future__ import annotations

from partuner.graph.zoo_builder import Builder

__all__ = ["SYNTHETIC_LARGE_BLOCKS", "branchy", "synthetic_large", "synthetic_large_plan"]


def branchy(b: Builder) -> str:
    """A small synthetic network with 4 parallel branch groups of 2-3 branches each.

    Groups (fork -> join): input -> stem.concat (2 branches: 2, 2 nodes), stem.concat ->
    a.concat (3 branches: 2, 3, 3 nodes), a.concat -> b.add (2 branches: 2, 3 nodes), pool ->
    c.concat (3 branches: 2, 3, 1 nodes).
    """
    s1 = b.conv_relu("stem.s1", "input", 3, 8, 3, stride=2, pad=1)
    s2 = b.conv_relu("stem.s2", "input", 3, 8, 1, stride=2)
    x = b.concat("stem.concat", [s1, s2])  # 16 channels, S/2
    a1 = b.conv_relu("a.b1", x, 16, 8, 1)
    a2 = b.conv("a.b2.conv2", b.conv_relu("a.b2.0", x, 16, 8, 3, pad=1), 8, 8, 3, pad=1, gain=1.0)
    a3 = b.conv_relu("a.b3.1", b.maxpool("a.b3.pool", x, 3, 1, pad=1), 16, 8, 1)
    x = b.concat("a.concat", [a1, a2, a3])  # 24 channels
    b1 = b.conv_relu("b.b1", x, 24, 24, 1, gain=1.0)
    b2 = b.conv(
        "b.b2.conv2", b.conv_relu("b.b2.0", x, 24, 24, 3, pad=1), 24, 24, 3, pad=1, gain=1.0
    )
    x = b.relu("b.relu", b.add("b.add", b1, b2))
    x = b.maxpool("pool", x, 2, 2)  # S/4
    c1 = b.conv_relu("c.b1", x, 24, 16, 1)
    c2 = b.conv("c.b2.conv2", b.conv_relu("c.b2.0", x, 24, 16, 3, pad=1), 16, 16, 3, pad=1)
    c3 = b.avgpool("c.b3.pool", x, 3, 1, pad=1)
    x = b.concat("c.concat", [c1, c2, c3])  # 16 + 16 + 24 = 56 channels
    return b.head(x, fc=(56, 10))


SYNTHETIC_LARGE_BLOCKS = 80  # fork-join blocks; 1000+ nodes in all
_TRUNK = 8  # channels between blocks
# Branch layers: 1x1 conv + Relu, 3x3 conv + Relu, 3x3 depthwise conv + Relu, 3x3/1 max pool,
# 3x3/1 average pool. Every layer keeps the spatial size.
_LAYERS = ("c1", "c3", "dw", "max", "avg")


def synthetic_large_plan(blocks: int = SYNTHETIC_LARGE_BLOCKS) -> list[list[tuple[str, ...]]]:
    """The layer kinds of each branch of each block of ``synthetic_large`` (no randomness).

    Block ``i`` has ``(2, 3, 4, 3)[i % 4]`` branches; its branch ``j`` has ``1 + (i + 2j) % 4``
    layers, layer ``m`` of kind ``_LAYERS[(i + 3j + m) % 5]``.

    Examples
    --------
    >>> synthetic_large_plan(2)
    [[('c1',), ('max', 'avg', 'c1')], [('c3', 'dw'), ('avg', 'c1', 'c3', 'dw'), ('dw', 'max')]]
    """
    plan = []
    for i in range(blocks):
        branches = []
        for j in range((2, 3, 4, 3)[i % 4]):
            length = 1 + (i + 2 * j) % 4
            branches.append(tuple(_LAYERS[(i + 3 * j + m) % 5] for m in range(length)))
        plan.append(branches)
    return plan


def synthetic_large(b: Builder) -> str:
    """A long chain of fork-join blocks, for planner scaling benchmarks: 1206 nodes, 80 groups.

    Stem: 3x3/2 conv + Relu and a 3x3/2 max pool (8 channels, S/4). Then
    :data:`SYNTHETIC_LARGE_BLOCKS` blocks laid out by :func:`synthetic_large_plan`, shaped like
    Inception-ResNet blocks: the block input forks into 2-4 branches of 1-4 layers (a branch's
    convs have 8 or 16 channels, alternating), a Concat joins them, a 1x1 conv ``block{i}.mix``
    maps them back to 8 channels and an Add puts the block input back (no activation after
    it, so the input still shows in the output after 80 blocks). Head: global average pool and
    a 10-way Gemm. Only the weights depend on the seed.
    """
    x = b.conv_relu("stem", "input", 3, _TRUNK, 3, stride=2, pad=1)
    x = b.maxpool("stem.pool", x, 3, 2, pad=1)
    plan = synthetic_large_plan()
    for i, branches in enumerate(plan):
        outs, widths = [], []
        for j, layers in enumerate(branches):
            y, c = x, _TRUNK
            width = 16 if (i + j) % 2 else 8
            for m, kind in enumerate(layers):
                p = f"block{i}.branch{j}.{m}"
                if kind == "c1":
                    y, c = b.conv_relu(p, y, c, width, 1), width
                elif kind == "c3":
                    y, c = b.conv_relu(p, y, c, width, 3, pad=1), width
                elif kind == "dw":
                    y = b.conv_relu(p, y, c, c, 3, pad=1, group=c)
                elif kind == "max":
                    y = b.maxpool(f"{p}.maxpool", y, 3, 1, pad=1)
                else:
                    y = b.avgpool(f"{p}.avgpool", y, 3, 1, pad=1)
            outs.append(y)
            widths.append(c)
        y = b.concat(f"block{i}.concat", outs)
        # A small gain: 80 residual Adds then grow the activations only a few times over.
        y = b.conv(f"block{i}.mix", y, sum(widths), _TRUNK, 1, gain=2.0 / len(plan))
        x = b.add(f"block{i}.add", x, y)
    return b.head(x, fc=(_TRUNK, 10))
