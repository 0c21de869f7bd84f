"""Zoo builders for the shortcut networks: resnet18, resnet50, densenet121.

Each function takes a :class:`~partuner.graph.zoo_builder.Builder` and returns the output value's
name; :func:`partuner.graph.zoo.build` is the entry point.
"""

from __future__ import annotations

from partuner.graph.zoo_builder import Builder

__all__ = ["densenet121", "resnet18", "resnet50"]


def resnet18(b: Builder) -> str:
    """torchvision ``resnet18``: BasicBlocks, a 1x1 stride-2 downsample conv where shapes change."""

    def block(p: str, x: str, cin: int, cout: int, stride: int) -> str:
        y = b.relu(f"{p}.relu", b.conv(f"{p}.conv1", x, cin, cout, 3, stride=stride, pad=1))
        # The residual branch's last conv gets half the He gain so the Add keeps activations tame.
        y = b.conv(f"{p}.conv2", y, cout, cout, 3, pad=1, gain=1.0)
        if stride != 1 or cin != cout:
            x = b.conv(f"{p}.downsample.0", x, cin, cout, 1, stride=stride, gain=1.0)
        return b.relu(f"{p}.relu_1", b.add(f"{p}.add", y, x))

    x = b.relu("relu", b.conv("conv1", "input", 3, 64, 7, stride=2, pad=3))
    x = b.maxpool("maxpool", x, 3, 2, pad=1)
    cin = 64
    for layer, cout in enumerate((64, 128, 256, 512), start=1):
        for i in range(2):
            stride = 2 if (i == 0 and layer > 1) else 1
            x = block(f"layer{layer}.{i}", x, cin, cout, stride)
            cin = cout
    return b.head(x, fc=(512, 1000))


RESNET50_LAYERS = (3, 4, 6, 3)  # Bottleneck blocks per stage


def resnet50(b: Builder) -> str:
    """torchvision ``resnet50`` (v1.5): 16 Bottleneck blocks in 4 stages, expansion 4.

    A block ``layerL.i`` is conv1 (1x1), conv2 (3x3, carrying the stride), conv3 (1x1, 4x the
    width) and an Add with its input; the first block of each stage (stride 2 from the second
    stage on, and 64 -> 256 channels in the first) runs its input through a 1x1 ``downsample.0``
    conv instead.
    """

    def block(p: str, x: str, cin: int, width: int, stride: int) -> str:
        y = b.relu(f"{p}.relu", b.conv(f"{p}.conv1", x, cin, width, 1))
        y = b.relu(f"{p}.relu_1", b.conv(f"{p}.conv2", y, width, width, 3, stride=stride, pad=1))
        # Small gains on the residual and shortcut convs keep 16 Adds from blowing up.
        y = b.conv(f"{p}.conv3", y, width, 4 * width, 1, gain=0.5)
        if stride != 1 or cin != 4 * width:
            x = b.conv(f"{p}.downsample.0", x, cin, 4 * width, 1, stride=stride, gain=1.0)
        return b.relu(f"{p}.relu_2", b.add(f"{p}.add", y, x))

    x = b.relu("relu", b.conv("conv1", "input", 3, 64, 7, stride=2, pad=3))
    x = b.maxpool("maxpool", x, 3, 2, pad=1)
    cin = 64
    for layer, (n, width) in enumerate(zip(RESNET50_LAYERS, (64, 128, 256, 512), strict=True), 1):
        for i in range(n):
            stride = 2 if (i == 0 and layer > 1) else 1
            x = block(f"layer{layer}.{i}", x, cin, width, stride)
            cin = 4 * width
    return b.head(x, fc=(2048, 1000))


DENSENET121_BLOCKS = (6, 12, 24, 16)  # dense layers per block; growth rate 32, bn_size 4


def densenet121(b: Builder) -> str:
    """torchvision ``densenet121``: 4 dense blocks of 6/12/24/16 layers, growth rate 32.

    Dense layer ``denseblockB.denselayerL`` is BN-ReLU-Conv1x1(128)-BN-ReLU-Conv3x3(32). Its
    first BN reads a concatenation, so no conv precedes it to fold into: it is a per-channel
    scale and shift (Mul, Add; :meth:`Builder.scale_shift`), and so are the transitions' BN and
    ``norm5``. The second BN is folded into conv1's bias; conv2 and the transition convs keep
    torchvision's ``bias=False``. As torchvision does, every layer concatenates the block input
    and all earlier layers' outputs (layer 1 reads the block input as is), and each block ends
    with one Concat of all of them. Transitions halve the channels (1x1 conv) and the size
    (2x2 AveragePool).
    """
    x = b.relu("features.relu0", b.conv("features.conv0", "input", 3, 64, 7, stride=2, pad=3))
    x = b.maxpool("features.pool0", x, 3, 2, pad=1)
    cin = 64
    for i, n in enumerate(DENSENET121_BLOCKS, start=1):
        feats = [x]
        for j in range(1, n + 1):
            p = f"features.denseblock{i}.denselayer{j}"
            c = cin + 32 * (j - 1)
            y = feats[0] if j == 1 else b.concat(f"{p}.concat", feats)
            y = b.relu(f"{p}.relu1", b.scale_shift(f"{p}.norm1", y, c))
            y = b.relu(f"{p}.relu2", b.conv(f"{p}.conv1", y, c, 128, 1))
            feats.append(b.conv(f"{p}.conv2", y, 128, 32, 3, pad=1, bias=False))
        x = b.concat(f"features.denseblock{i}.concat", feats)
        cin += 32 * n
        if i < len(DENSENET121_BLOCKS):
            p = f"features.transition{i}"
            x = b.relu(f"{p}.relu", b.scale_shift(f"{p}.norm", x, cin))
            x = b.conv(f"{p}.conv", x, cin, cin // 2, 1, bias=False)
            x = b.avgpool(f"{p}.pool", x, 2, 2)
            cin //= 2
    x = b.relu("relu", b.scale_shift("features.norm5", x, cin))
    return b.head(x, fc=(cin, 1000))
