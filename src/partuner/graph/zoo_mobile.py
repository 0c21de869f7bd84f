"""Zoo builders for the small mobile networks: squeezenet1_1, mobilenet_v2, shufflenet_v2_x1_0.

Each function takes a :class:`~partuner.graph.zoo_builder.Builder` and returns the output value's
name; :func:`partuner.graph.zoo.build` is the entry point.
"""

from __future__ import annotations

from partuner.graph.zoo_builder import Builder, conv_out

__all__ = ["mobilenet_v2", "shufflenet_v2", "squeezenet"]


def squeezenet(b: Builder) -> str:
    """torchvision ``squeezenet1_1`` (dropout dropped, as in an inference export)."""

    def fire(i: int, x: str, cin: int, squeeze: int, e1: int, e3: int) -> str:
        p = f"features.{i}"
        s = b.relu(f"{p}.squeeze_activation", b.conv(f"{p}.squeeze", x, cin, squeeze, 1))
        a = b.relu(f"{p}.expand1x1_activation", b.conv(f"{p}.expand1x1", s, squeeze, e1, 1))
        c = b.relu(f"{p}.expand3x3_activation", b.conv(f"{p}.expand3x3", s, squeeze, e3, 3, pad=1))
        return b.concat(f"{p}.concat", [a, c])

    x = b.relu("features.1", b.conv("features.0", "input", 3, 64, 3, stride=2))
    x = b.maxpool("features.2", x, 3, 2, ceil=True)
    x = fire(3, x, 64, 16, 64, 64)
    x = fire(4, x, 128, 16, 64, 64)
    x = b.maxpool("features.5", x, 3, 2, ceil=True)
    x = fire(6, x, 128, 32, 128, 128)
    x = fire(7, x, 256, 32, 128, 128)
    x = b.maxpool("features.8", x, 3, 2, ceil=True)
    x = fire(9, x, 256, 48, 192, 192)
    x = fire(10, x, 384, 48, 192, 192)
    x = fire(11, x, 384, 64, 256, 256)
    x = fire(12, x, 512, 64, 256, 256)
    x = b.relu("classifier.2", b.conv("classifier.1", x, 512, 1000, 1))
    return b.head(x, fc=None, prefix="classifier.3.")


# mobilenet_v2's inverted residual settings: expand ratio t, out channels c, repeats n, stride s.
MOBILENET_V2_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(b: Builder) -> str:
    """torchvision ``mobilenet_v2`` (width 1.0): 17 inverted residual blocks, ReLU6 as Clip.

    Block ``features.i``: a 1x1 expand conv (unless t = 1), a 3x3 depthwise conv (``group`` = its
    channels) carrying the stride, a linear 1x1 projection, and an Add with the block's input
    when the stride is 1 and the channels match (10 of the 17 blocks).
    """

    def cna(p: str, x: str, cin: int, cout: int, k: int, **kw: int) -> str:
        """torchvision's Conv2dNormActivation: conv ``{p}.0``, folded BN, ReLU6 ``{p}.2``."""
        return b.relu6(f"{p}.2", b.conv(f"{p}.0", x, cin, cout, k, pad=k // 2, **kw))

    def block(i: int, x: str, cin: int, cout: int, stride: int, t: int) -> str:
        p = f"features.{i}.conv"
        hidden = cin * t
        y, j = x, 0
        if t != 1:
            y, j = cna(f"{p}.0", y, cin, hidden, 1), 1
        y = cna(f"{p}.{j}", y, hidden, hidden, 3, stride=stride, group=hidden)
        residual = stride == 1 and cin == cout
        # The projection is linear; in a residual block it gets half the He gain so the Adds
        # keep activations tame.
        y = b.conv(f"{p}.{j + 1}", y, hidden, cout, 1, gain=1.0 if residual else 2.0)
        return b.add(f"features.{i}.add", x, y) if residual else y

    x = cna("features.0", "input", 3, 32, 3, stride=2)
    cin, i = 32, 1
    for t, c, n, s in MOBILENET_V2_SETTINGS:
        for r in range(n):
            x = block(i, x, cin, c, s if r == 0 else 1, t)
            cin, i = c, i + 1
    x = cna(f"features.{i}", x, cin, 1280, 1)
    return b.head(x, fc=(1280, 1000))


# shufflenet_v2_x1_0: units per stage and the channels after conv1 and each stage.
SHUFFLENET_V2_REPEATS = (4, 8, 4)
SHUFFLENET_V2_CHANNELS = (24, 116, 232, 464, 1024)


def shufflenet_v2(b: Builder) -> str:
    """torchvision ``shufflenet_v2_x1_0``: 16 units in 3 stages, channel split and shuffle.

    A stride-2 unit (the first of each stage) runs ``branch1`` (3x3 depthwise, 1x1) and
    ``branch2`` (1x1, 3x3 depthwise, 1x1) on its input and concatenates them; a stride-1 unit
    splits its channels in two (Split), keeps the first half and runs ``branch2`` on the second.
    Each unit ends with a channel shuffle of 2 groups (Reshape, Transpose, Reshape; the Reshape
    targets are int64 initializers for a batch of 1 at this model's image size). The head
    averages with ReduceMean, as torchvision's ``x.mean([2, 3])`` exports.
    """

    def shuffle(p: str, x: str, c: int, h: int) -> str:
        x = b.reshape(f"{p}.shuffle.reshape", x, (1, 2, c // 2, h, h))
        x = b.transpose(f"{p}.shuffle.transpose", x, [0, 2, 1, 3, 4])
        return b.reshape(f"{p}.shuffle.reshape_1", x, (1, c, h, h))

    def branch2(p: str, x: str, cin: int, bf: int, stride: int) -> str:
        y = b.relu(f"{p}.branch2.2", b.conv(f"{p}.branch2.0", x, cin, bf, 1))
        y = b.conv(f"{p}.branch2.3", y, bf, bf, 3, stride=stride, pad=1, group=bf, gain=1.0)
        return b.relu(f"{p}.branch2.7", b.conv(f"{p}.branch2.5", y, bf, bf, 1))

    def unit(p: str, x: str, cin: int, cout: int, stride: int, h: int) -> str:
        bf = cout // 2
        if stride == 1:
            x1, x2 = b.split2(f"{p}.chunk", x)
            y = b.concat(f"{p}.concat", [x1, branch2(p, x2, bf, bf, 1)])
        else:
            y1 = b.conv(f"{p}.branch1.0", x, cin, cin, 3, stride=2, pad=1, group=cin, gain=1.0)
            y1 = b.relu(f"{p}.branch1.4", b.conv(f"{p}.branch1.2", y1, cin, bf, 1))
            y = b.concat(f"{p}.concat", [y1, branch2(p, x, cin, bf, 2)])
        return shuffle(p, y, cout, h)

    ch = SHUFFLENET_V2_CHANNELS
    x = b.relu("conv1.2", b.conv("conv1.0", "input", 3, ch[0], 3, stride=2, pad=1))
    x = b.maxpool("maxpool", x, 3, 2, pad=1)
    h = conv_out(conv_out(b.image_size, 3, 2, 1), 3, 2, 1)
    cin = ch[0]
    for stage, (n, cout) in enumerate(zip(SHUFFLENET_V2_REPEATS, ch[1:4], strict=True), start=2):
        h = conv_out(h, 3, 2, 1)
        for i in range(n):
            x = unit(f"stage{stage}.{i}", x, cin, cout, 2 if i == 0 else 1, h)
            cin = cout
    x = b.relu("conv5.2", b.conv("conv5.0", x, cin, ch[4], 1))
    x = b.mean("mean", x)
    return b.fc(x, ch[4], 1000)
