"""CNN-shaped synthetic selection problems for benchmarking the solvers.

Every conv gets 16-64 schedule candidates, each with an (input block, output block)
pair from BLOCKS (where the block divides the channel count) and a random kernel time
scaled by the conv's FLOPs.  Layout-agnostic ops (add, concat) choose one block valid
for all their tensors.  A tensor's producer feeds all its consumers through one shared
conversion whose table is a transform time by (from, to) block, scaled by tensor size.
Classes are indices into BLOCKS; the network input and outputs are plain NCHW (block 1).

>>> p = chain(4, seed=0)
>>> p.num_nodes, len(p.conversions)
(6, 5)
"""
from __future__ import annotations

import numpy as np

from solvers import Problem

BLOCKS = (1, 2, 4, 8, 16, 32, 64)


class Builder:
    """Adds convs / layout-agnostic ops and wires tensors to their consumers."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.p = Problem()
        # producer -> [(consumer node, class each consumer choice needs)]
        self.consumers: dict[int, list[tuple[int, np.ndarray]]] = {}
        self.out_class: dict[int, np.ndarray] = {}
        self.tensor: dict[int, float] = {}  # producer -> tensor size (elements)

    def blocks(self, channels: int) -> list[int]:
        return [n for n, b in enumerate(BLOCKS) if channels % b == 0]

    def input(self, channels: int, hw: int) -> int:
        node = self.p.add_node([0.0])
        self.out_class[node] = np.array([0])
        self.tensor[node] = channels * hw * hw
        self.consumers[node] = []
        return node

    def conv(self, src: int, cin: int, cout: int, hw: int, k: int = 3) -> int:
        ins, outs = self.blocks(cin), self.blocks(cout)
        m = int(self.rng.integers(16, 65))
        ic = self.rng.choice(ins, m)
        oc = self.rng.choice(outs, m)
        flops = 2 * cin * cout * k * k * hw * hw
        # bigger blocks vectorise better, with plenty of per-candidate noise
        speed = 1.0 + 0.15 * np.minimum(ic, 4) + 0.25 * np.minimum(oc, 4)
        cost = flops / 5e7 / speed * self.rng.uniform(0.8, 1.6, m)  # ms at ~50 GFLOP/s
        node = self.p.add_node(cost)
        self.consumers[src].append((node, ic))
        self.out_class[node] = oc
        self.tensor[node] = cout * hw * hw
        self.consumers[node] = []
        return node

    def join(self, srcs: list[int], channels: list[int], out_channels: int, hw: int) -> int:
        """Layout-agnostic op over several inputs (add / concat): one block for all."""
        ok = sorted(set.intersection(*(set(self.blocks(c)) for c in channels + [out_channels])))
        node = self.p.add_node(out_channels * hw * hw * 1e-7 * self.rng.uniform(0.9, 1.1, len(ok)))
        cls = np.array(ok)
        for s in srcs:
            self.consumers[s].append((node, cls))
        self.out_class[node] = cls
        self.tensor[node] = out_channels * hw * hw
        self.consumers[node] = []
        return node

    def output(self, src: int) -> None:
        node = self.p.add_node([0.0])
        self.consumers[src].append((node, np.array([0])))
        self.consumers[node] = []
        self.out_class[node] = np.array([0])

    def build(self) -> Problem:
        logb = np.log2(BLOCKS)
        shape = np.abs(logb[:, None] - logb[None, :])
        for src, cons in self.consumers.items():
            if not cons:
                continue
            # ~1 GB/s effective transform bandwidth, dearer across distant block sizes
            table = self.tensor[src] * 4 / 1e6 * (0.5 + 0.1 * shape) * self.rng.uniform(0.9, 1.1)
            dsts, needs = [d for d, _ in cons], [c for _, c in cons]
            self.p.add_conversion(src, dsts, self.out_class[src], needs, table)
        return self.p


def chain(n: int = 20, seed: int = 0) -> Problem:
    b = Builder(seed)
    x, c = b.input(3, 224), 3
    for i in range(n):
        cout = 64 * 2 ** min(i // 5, 3)
        x, c = b.conv(x, c, cout, 56), cout
    b.output(x)
    return b.build()


def resnet50(seed: int = 0) -> Problem:
    """53 convs, 16 adds (bottlenecks [3, 4, 6, 3])."""
    b = Builder(seed)
    x = b.conv(b.input(3, 224), 3, 64, 112, k=7)
    c, hw = 64, 56
    for stage, blocks in enumerate([3, 4, 6, 3]):
        width = 64 * 2**stage
        for i in range(blocks):
            if i == 0 and stage > 0:
                hw //= 2
            a = b.conv(x, c, width, hw, 1)
            a = b.conv(a, width, width, hw, 3)
            a = b.conv(a, width, 4 * width, hw, 1)
            short = b.conv(x, c, 4 * width, hw, 1) if i == 0 else x
            x, c = b.join([a, short], [4 * width, 4 * width], 4 * width, hw), 4 * width
    b.output(x)
    return b.build()


def inception(modules: int = 9, seed: int = 0) -> Problem:
    """GoogLeNet-like: stem, then modules of four branches joined by a concat."""
    b = Builder(seed)
    x = b.conv(b.input(3, 224), 3, 64, 112, k=7)
    x = b.conv(x, 64, 192, 56, 3)
    c, hw = 192, 28
    for m in range(modules):
        if m in (2, 7):
            hw //= 2
        w = 64 + 16 * m
        b1 = b.conv(x, c, w, hw, 1)
        b2 = b.conv(b.conv(x, c, w // 2, hw, 1), w // 2, w, hw, 3)
        b3 = b.conv(b.conv(x, c, w // 4, hw, 1), w // 4, w // 2, hw, 5)
        b4 = b.conv(x, c, w // 2, hw, 1)  # after a (layout-agnostic) pool
        out = w + w + w // 2 + w // 2
        x, c = b.join([b1, b2, b3, b4], [w, w, w // 2, w // 2], out, hw), out
    b.output(x)
    return b.build()


def densenet(seed: int = 0, blocks=(6, 12, 24, 16), growth: int = 32) -> Problem:
    """2 * sum(blocks) + 4 convs; concat j of a dense block reads the block input and every
    earlier layer (DenseNet-121: blocks 6, 12, 24, 16; DenseNet-201: 6, 12, 48, 32)."""
    b = Builder(seed)
    x = b.conv(b.input(3, 224), 3, 64, 112, k=7)
    c, hw = 64, 56
    for n, layers in enumerate(blocks):
        feats, chans = [x], [c]
        for _ in range(layers):
            cat = b.join(list(feats), list(chans), sum(chans), hw) if len(feats) > 1 else feats[0]
            y = b.conv(cat, sum(chans), 4 * growth, hw, 1)
            y = b.conv(y, 4 * growth, growth, hw, 3)
            feats.append(y)
            chans.append(growth)
        cat = b.join(list(feats), list(chans), sum(chans), hw)
        c = sum(chans)
        if n < len(blocks) - 1:
            c //= 2
            x = b.conv(cat, sum(chans), c, hw, 1)
            hw //= 2
        else:
            x = cat
    b.output(x)
    return b.build()


def densenet121(seed: int = 0) -> Problem:
    """120 convs."""
    return densenet(seed, (6, 12, 24, 16))


def densenet201(seed: int = 0) -> Problem:
    """200 convs."""
    return densenet(seed, (6, 12, 48, 32))


def inception_v3(seed: int = 0) -> Problem:
    """94 convs as in Inception-v3: stem, 3 A, reduction A, 4 C (7x1 / 1x7 chains),
    reduction B, 2 E (branches that split in two); pools are layout-agnostic, so a pool
    branch is the module input itself."""
    b = Builder(seed)

    def chain(x, c, hw, convs):
        for cout, k in convs:
            x, c = b.conv(x, c, cout, hw, k), cout
        return x, c

    def module(x, c, hw, branches):
        outs = [chain(x, c, hw, br) for br in branches]
        total = sum(ch for _, ch in outs)
        return b.join([o for o, _ in outs], [ch for _, ch in outs], total, hw), total

    x, c = chain(b.input(3, 299), 3, 147, [(32, 3), (32, 3), (64, 3)])
    x, c = chain(x, c, 71, [(80, 1), (192, 3)])
    for pool in (32, 64, 64):
        x, c = module(x, c, 35, [[(64, 1)], [(48, 1), (64, 5)], [(64, 1), (96, 3), (96, 3)],
                                 [(pool, 1)]])
    x, c = module(x, c, 17, [[(384, 3)], [(64, 1), (96, 3), (96, 3)], []])
    for c7 in (128, 160, 160, 192):
        x, c = module(x, c, 17, [[(192, 1)], [(c7, 1), (c7, 7), (192, 7)],
                                 [(c7, 1), (c7, 7), (c7, 7), (c7, 7), (192, 7)], [(192, 1)]])
    x, c = module(x, c, 8, [[(192, 1), (320, 3)], [(192, 1), (192, 7), (192, 7), (192, 3)], []])
    for _ in range(2):
        a, _ = chain(x, c, 8, [(384, 1)])
        d, _ = chain(x, c, 8, [(448, 1), (384, 3)])
        outs = [chain(x, c, 8, [(320, 1)]), chain(a, 384, 8, [(384, 3)]),
                chain(a, 384, 8, [(384, 3)]), chain(d, 384, 8, [(384, 3)]),
                chain(d, 384, 8, [(384, 3)]), chain(x, c, 8, [(192, 1)])]
        total = sum(ch for _, ch in outs)
        x, c = b.join([o for o, _ in outs], [ch for _, ch in outs], total, 8), total
    b.output(x)
    return b.build()


def ssd(seed: int = 0) -> Problem:
    """VGG-ish backbone plus extra layers; six feature maps each with loc and conf heads."""
    b = Builder(seed)
    x, c, hw = b.input(3, 300), 3, 300
    sources = []
    for n, (cout, reps) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]):
        for _ in range(reps):
            x, c = b.conv(x, c, cout, hw), cout
        if n == 3:
            sources.append((x, c, hw))
        hw = (hw + 1) // 2
    x, c = b.conv(x, c, 1024, hw), 1024
    x, c = b.conv(x, c, 1024, hw, 1), 1024
    sources.append((x, c, hw))
    for cout in (512, 256, 256, 256):
        x = b.conv(x, c, cout // 2, hw, 1)
        hw = max(1, (hw + 1) // 2)
        x, c = b.conv(x, cout // 2, cout, hw), cout
        sources.append((x, c, hw))
    for src, ch, shw in sources:
        for classes in (4 * 6, 21 * 6):
            b.output(b.conv(src, ch, classes, shw))
    return b.build()


INSTANCES = {
    "chain-20": chain,
    "resnet50-like": resnet50,
    "inception-like": inception,
    "densenet121-like": densenet121,
    "ssd-like": ssd,
    "densenet201-like": densenet201,
    "inception-v3-like": inception_v3,
}
