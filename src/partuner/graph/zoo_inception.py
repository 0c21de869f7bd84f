"""Zoo builders for the Inception family: googlenet, inception_v3.

Each function takes a :class:`~partuner.graph.zoo_builder.Builder` and returns the output value's
name; :func:`partuner.graph.zoo.build` is the entry point.
"""

from __future__ import annotations

from partuner.graph.zoo_builder import Builder

__all__ = ["googlenet", "inception_v3"]

# googlenet inception blocks: (name, in, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj)
_INCEPTION = {
    "3a": (192, 64, 96, 128, 16, 32, 32),
    "3b": (256, 128, 128, 192, 32, 96, 64),
    "4a": (480, 192, 96, 208, 16, 48, 64),
    "4b": (512, 160, 112, 224, 24, 64, 64),
    "4c": (512, 128, 128, 256, 24, 64, 64),
    "4d": (512, 112, 144, 288, 32, 64, 64),
    "4e": (528, 256, 160, 320, 32, 128, 128),
    "5a": (832, 256, 160, 320, 32, 128, 128),
    "5b": (832, 384, 192, 384, 48, 128, 128),
}


def googlenet(b: Builder) -> str:
    """torchvision ``googlenet`` (no aux heads, no transform_input; the 5x5 branch is 3x3)."""

    def inception(tag: str, x: str) -> str:
        cin, c1, c3r, c3, c5r, c5, pp = _INCEPTION[tag]
        p = f"inception{tag}"
        y1 = b.conv_relu(f"{p}.branch1", x, cin, c1, 1)
        y2 = b.conv_relu(f"{p}.branch2.0", x, cin, c3r, 1)
        y2 = b.conv_relu(f"{p}.branch2.1", y2, c3r, c3, 3, pad=1)
        y3 = b.conv_relu(f"{p}.branch3.0", x, cin, c5r, 1)
        y3 = b.conv_relu(f"{p}.branch3.1", y3, c5r, c5, 3, pad=1)
        y4 = b.maxpool(f"{p}.branch4.0", x, 3, 1, pad=1, ceil=True)
        y4 = b.conv_relu(f"{p}.branch4.1", y4, cin, pp, 1)
        return b.concat(f"{p}.concat", [y1, y2, y3, y4])

    x = b.conv_relu("conv1", "input", 3, 64, 7, stride=2, pad=3)
    x = b.maxpool("maxpool1", x, 3, 2, ceil=True)
    x = b.conv_relu("conv2", x, 64, 64, 1)
    x = b.conv_relu("conv3", x, 64, 192, 3, pad=1)
    x = b.maxpool("maxpool2", x, 3, 2, ceil=True)
    x = inception("3b", inception("3a", x))
    x = b.maxpool("maxpool3", x, 3, 2, ceil=True)
    for tag in ("4a", "4b", "4c", "4d", "4e"):
        x = inception(tag, x)
    x = b.maxpool("maxpool4", x, 2, 2, ceil=True)
    x = inception("5b", inception("5a", x))
    return b.head(x, fc=(1024, 1000))


def inception_v3(b: Builder) -> str:
    """torchvision ``inception_v3`` (Inception3 without the aux head and transform_input).

    Stem: five BasicConv2d (conv + folded BN + ReLU) and two 3x3/2 max pools; then
    ``Mixed_5b..5d`` (InceptionA), ``Mixed_6a`` (InceptionB, stride 2), ``Mixed_6b..6e``
    (InceptionC, factorised 1x7/7x1 convs), ``Mixed_7a`` (InceptionD, stride 2) and
    ``Mixed_7b..7c`` (InceptionE, whose 3x3 branches fork into a 1x3 || 3x1 pair and
    concatenate it). The pool branches of A, C and E are 3x3/1 average pools counting the padding,
    as ``F.avg_pool2d`` does.
    """

    def conv(p: str, x: str, cin: int, cout: int, k: int | tuple[int, int], **kw: object) -> str:
        """torchvision's BasicConv2d: ``{p}.conv`` (BN folded) and ``{p}.relu``."""
        return b.conv_relu(p, x, cin, cout, k, **kw)

    def pool_branch(p: str, x: str, cin: int, cout: int) -> str:
        y = b.avgpool(f"{p}.branch_pool.avgpool", x, 3, 1, pad=1, include_pad=True)
        return conv(f"{p}.branch_pool", y, cin, cout, 1)

    def block_a(p: str, x: str, cin: int, pool_features: int) -> str:
        y1 = conv(f"{p}.branch1x1", x, cin, 64, 1)
        y5 = conv(f"{p}.branch5x5_1", x, cin, 48, 1)
        y5 = conv(f"{p}.branch5x5_2", y5, 48, 64, 5, pad=2)
        y3 = conv(f"{p}.branch3x3dbl_1", x, cin, 64, 1)
        y3 = conv(f"{p}.branch3x3dbl_2", y3, 64, 96, 3, pad=1)
        y3 = conv(f"{p}.branch3x3dbl_3", y3, 96, 96, 3, pad=1)
        yp = pool_branch(p, x, cin, pool_features)
        return b.concat(f"{p}.concat", [y1, y5, y3, yp])

    def block_b(p: str, x: str, cin: int) -> str:
        y3 = conv(f"{p}.branch3x3", x, cin, 384, 3, stride=2)
        yd = conv(f"{p}.branch3x3dbl_1", x, cin, 64, 1)
        yd = conv(f"{p}.branch3x3dbl_2", yd, 64, 96, 3, pad=1)
        yd = conv(f"{p}.branch3x3dbl_3", yd, 96, 96, 3, stride=2)
        yp = b.maxpool(f"{p}.branch_pool", x, 3, 2)
        return b.concat(f"{p}.concat", [y3, yd, yp])

    def block_c(p: str, x: str, c7: int) -> str:
        y1 = conv(f"{p}.branch1x1", x, 768, 192, 1)
        y7 = conv(f"{p}.branch7x7_1", x, 768, c7, 1)
        y7 = conv(f"{p}.branch7x7_2", y7, c7, c7, (1, 7), pad=(0, 3))
        y7 = conv(f"{p}.branch7x7_3", y7, c7, 192, (7, 1), pad=(3, 0))
        yd = conv(f"{p}.branch7x7dbl_1", x, 768, c7, 1)
        for i, k in enumerate(((7, 1), (1, 7), (7, 1)), start=2):
            yd = conv(f"{p}.branch7x7dbl_{i}", yd, c7, c7, k, pad=(k[0] // 2, k[1] // 2))
        yd = conv(f"{p}.branch7x7dbl_5", yd, c7, 192, (1, 7), pad=(0, 3))
        yp = pool_branch(p, x, 768, 192)
        return b.concat(f"{p}.concat", [y1, y7, yd, yp])

    def block_d(p: str, x: str, cin: int) -> str:
        y3 = conv(f"{p}.branch3x3_1", x, cin, 192, 1)
        y3 = conv(f"{p}.branch3x3_2", y3, 192, 320, 3, stride=2)
        y7 = conv(f"{p}.branch7x7x3_1", x, cin, 192, 1)
        y7 = conv(f"{p}.branch7x7x3_2", y7, 192, 192, (1, 7), pad=(0, 3))
        y7 = conv(f"{p}.branch7x7x3_3", y7, 192, 192, (7, 1), pad=(3, 0))
        y7 = conv(f"{p}.branch7x7x3_4", y7, 192, 192, 3, stride=2)
        yp = b.maxpool(f"{p}.branch_pool", x, 3, 2)
        return b.concat(f"{p}.concat", [y3, y7, yp])

    def split_1x3_3x1(p: str, x: str) -> str:
        """The 1x3 || 3x1 pair of InceptionE, 384 channels each, concatenated."""
        ya = conv(f"{p}a", x, 384, 384, (1, 3), pad=(0, 1))
        yb = conv(f"{p}b", x, 384, 384, (3, 1), pad=(1, 0))
        return b.concat(f"{p}.concat", [ya, yb])

    def block_e(p: str, x: str, cin: int) -> str:
        y1 = conv(f"{p}.branch1x1", x, cin, 320, 1)
        y3 = conv(f"{p}.branch3x3_1", x, cin, 384, 1)
        y3 = split_1x3_3x1(f"{p}.branch3x3_2", y3)
        yd = conv(f"{p}.branch3x3dbl_1", x, cin, 448, 1)
        yd = conv(f"{p}.branch3x3dbl_2", yd, 448, 384, 3, pad=1)
        yd = split_1x3_3x1(f"{p}.branch3x3dbl_3", yd)
        yp = pool_branch(p, x, cin, 192)
        return b.concat(f"{p}.concat", [y1, y3, yd, yp])

    x = conv("Conv2d_1a_3x3", "input", 3, 32, 3, stride=2)
    x = conv("Conv2d_2a_3x3", x, 32, 32, 3)
    x = conv("Conv2d_2b_3x3", x, 32, 64, 3, pad=1)
    x = b.maxpool("maxpool1", x, 3, 2)
    x = conv("Conv2d_3b_1x1", x, 64, 80, 1)
    x = conv("Conv2d_4a_3x3", x, 80, 192, 3)
    x = b.maxpool("maxpool2", x, 3, 2)
    x = block_a("Mixed_5b", x, 192, 32)
    x = block_a("Mixed_5c", x, 256, 64)
    x = block_a("Mixed_5d", x, 288, 64)
    x = block_b("Mixed_6a", x, 288)
    for tag, c7 in (("6b", 128), ("6c", 160), ("6d", 160), ("6e", 192)):
        x = block_c(f"Mixed_{tag}", x, c7)
    x = block_d("Mixed_7a", x, 768)
    x = block_e("Mixed_7b", x, 1280)
    x = block_e("Mixed_7c", x, 2048)
    return b.head(x, fc=(2048, 1000))
