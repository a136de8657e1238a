"""Small Paddle (paddle.nn) versions of the architectures `clearsight import paddle` reads,
with the Paddle ports' names (docs/paddle.md), for the import tests. Import only after
`tests.optional.need("paddle")`.

Each computes the same function as its clearsight module on the same weights, written the
Paddle way (BatchNorm2D kept, Linear weights [in, out], the MBCNN baseline's Keras-layout
bandpass), so an import that maps a name or a layout wrongly fails the output comparison.
"""

from __future__ import annotations

import math

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

paddle.set_device("cpu")


def randomize(layer: nn.Layer, seed: int) -> None:
    """Random values for every parameter and batch-norm statistic (variances > 0, bandpass
    weights > 0), so an identity or a default initialisation cannot hide a mapping error."""
    rng = np.random.default_rng(seed)
    for name, t in layer.state_dict().items():
        shape = list(t.shape)
        if name.endswith(("_variance", "it_weights")):
            v = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(".kernel"):
            continue
        else:
            v = rng.normal(0, 0.3 / math.sqrt(max(1, int(np.prod(shape[1:])))), shape)
            if name.endswith(("_mean", ".bias", "scale")):
                v = rng.normal(0, 0.1, shape)
        t.set_value(v.astype("float32"))


# -- RESCAN (official names: rnns, dec) --------------------------------------------------
class SE(nn.Layer):
    def __init__(self, c: int, hidden: int = 6) -> None:
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(c, hidden), nn.ReLU(), nn.Linear(hidden, c), nn.Sigmoid())

    def forward(self, x):
        return x * self.fc(x.mean(axis=[2, 3])).unsqueeze([2, 3])


class ConvGRU(nn.Layer):
    def __init__(self, cin: int, cout: int, dilation: int) -> None:
        super().__init__()
        for g in "zrn":
            setattr(
                self, f"conv_x{g}", nn.Conv2D(cin, cout, 3, padding=dilation, dilation=dilation)
            )
        for g in "zrn":
            setattr(self, f"conv_h{g}", nn.Conv2D(cout, cout, 3, padding=1))
        self.se = SE(cout)
        self.relu = nn.LeakyReLU(0.2)

    def forward(self, x, h):
        if h is None:
            h = F.sigmoid(self.conv_xz(x)) * paddle.tanh(self.conv_xn(x))
        else:
            z = F.sigmoid(self.conv_xz(x) + self.conv_hz(h))
            r = F.sigmoid(self.conv_xr(x) + self.conv_hr(h))
            n = paddle.tanh(self.conv_xn(x) + self.conv_hn(r * h))
            h = (1 - z) * h + z * n
        h = self.relu(self.se(h))
        return h, h


class PaddleRESCAN(nn.Layer):
    def __init__(self, channels: int, stages: int, depth: int) -> None:
        super().__init__()
        self.stages = stages
        units = [ConvGRU(3, channels, 1)] + [
            ConvGRU(channels, channels, 2**i) for i in range(depth - 3)
        ]
        self.rnns = nn.LayerList(units)
        self.dec = nn.Sequential(
            nn.Conv2D(channels, channels, 3, padding=1),
            SE(channels),
            nn.LeakyReLU(0.2),
            nn.Conv2D(channels, 3, 1),
        )

    def forward(self, x):
        original, states, outs = x, [None] * len(self.rnns), []
        for _ in range(self.stages):
            new = []
            for unit, h in zip(self.rnns, states, strict=True):
                x, h = unit(x, h)
                new.append(h)
            out = self.dec(x)
            outs.append(out)
            states, x = new, original - out
        return outs


# -- MBCNN (the Paddle demoiré baseline's names and bandpass layout) ---------------------
def space_to_depth(x):
    n, c, h, w = x.shape
    x = x.reshape([n, c, h // 2, 2, w // 2, 2]).transpose([0, 3, 5, 1, 2, 4])
    return x.reshape([n, 4 * c, h // 2, w // 2])


def depth_to_space(x):
    n, c, h, w = x.shape
    x = x.reshape([n, 2, 2, c // 4, h, w]).transpose([0, 3, 4, 1, 5, 2])
    return x.reshape([n, c // 4, h * 2, w * 2])


class ConvRL(nn.Layer):
    def __init__(self, cin, cout, k, dilation=1, stride=1, relu=True) -> None:
        super().__init__()
        self.conv = nn.Conv2D(
            cin, cout, k, stride=stride, padding=dilation * (k // 2), dilation=dilation
        )
        self.relu = relu

    def forward(self, x):
        y = self.conv(x)
        return F.relu(y) if self.relu else y


def idct_keras() -> np.ndarray:
    """The inverse DCT as the Keras/Paddle baseline stores it: [1, 1, 64 in, 64 out]."""
    k = np.zeros((64, 64))
    a = [math.sqrt(1 / 8)] + [math.sqrt(2 / 8)] * 7
    for i in range(8):
        for j in range(8):
            for u in range(8):
                for v in range(8):
                    k[u * 8 + v, i * 8 + j] = (
                        a[u] * a[v]
                        * math.cos((2 * i + 1) * u * math.pi / 16)
                        * math.cos((2 * j + 1) * v * math.pi / 16)
                    )  # fmt: skip
    return k.reshape(1, 1, 64, 64).astype("float32")


class AdaptiveImplicitTrans(nn.Layer):
    """The baseline's learnable bandpass; `overwrite=True` is its bug (kernel reassigned)."""

    def __init__(self, overwrite: bool) -> None:
        super().__init__()
        self.overwrite = overwrite
        self.register_buffer("kernel", paddle.to_tensor(idct_keras()), persistable=True)
        self.it_weights = self.create_parameter(
            [1, 1, 64, 1], default_initializer=nn.initializer.Constant(1.0)
        )

    def forward(self, x):
        if self.overwrite:
            self.kernel = self.kernel * self.it_weights
            k = self.kernel
        else:
            k = self.kernel * self.it_weights
        k = k.reshape([64, 64]).transpose([1, 0]).reshape([64, 64, 1, 1])
        return F.conv2d(x, k)


class Scale(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.scale = self.create_parameter([1], default_initializer=nn.initializer.Constant(0.1))

    def forward(self, x):
        return x * self.scale


class Dense(nn.Layer):
    def __init__(self, n, dilations) -> None:
        super().__init__()
        self.layers = nn.LayerList(
            [ConvRL(2 * n + i * n, n, 3, dilation=d) for i, d in enumerate(dilations)]
        )

    def dense(self, x):
        for layer in self.layers:
            x = paddle.concat([layer(x), x], axis=1)
        return x


class PreBlock(Dense):
    def __init__(self, n, dilations, overwrite) -> None:
        super().__init__(n, dilations)
        self.conv3 = ConvRL(7 * n, 64, 3, relu=False)
        self.adap = AdaptiveImplicitTrans(overwrite)
        self.conv1 = ConvRL(64, 2 * n, 1, relu=False)
        self.scale = Scale()

    def forward(self, x):
        return x + self.scale(self.conv1(self.adap(self.conv3(self.dense(x)))))


class PosBlock(Dense):
    def __init__(self, n, dilations) -> None:
        super().__init__(n, dilations)
        self.conv_rl = ConvRL(7 * n, 2 * n, 1)

    def forward(self, x):
        return self.conv_rl(self.dense(x))


class GlobalBlock(nn.Layer):
    def __init__(self, n) -> None:
        super().__init__()
        self.conv_rl = ConvRL(2 * n, 4 * n, 3, stride=2)
        self.fc1 = nn.Linear(4 * n, 16 * n)
        self.fc2 = nn.Linear(16 * n, 8 * n)
        self.fc3 = nn.Linear(8 * n, 4 * n)
        self.conv_rl_1 = ConvRL(2 * n, 4 * n, 1)
        self.conv_rl_2 = ConvRL(4 * n, 2 * n, 1)

    def forward(self, x):
        v = self.conv_rl(x).mean(axis=[2, 3])
        v = self.fc3(F.relu(self.fc2(F.relu(self.fc1(v)))))
        return self.conv_rl_2(self.conv_rl_1(x) * v.unsqueeze([2, 3]))


A, B, C = (1, 2, 3, 2, 1), (1, 2, 3, 2, 1), (1, 2, 2, 2, 1)


class PaddleMBCNN(nn.Layer):
    """`baseline_bugs=True`: the demoiré baseline's kernel overwrite and its
    `_t1_global_block` assigned twice (both t1 sites then run the second block)."""

    def __init__(self, n: int, baseline_bugs: bool = False) -> None:
        super().__init__()
        bug = self.bugs = baseline_bugs
        self._e1_conv_rl = ConvRL(12, 2 * n, 3)
        self._e1_pre_block = PreBlock(n, A, bug)
        self._e2_conv_rl = ConvRL(2 * n, 2 * n, 3, stride=2)
        self._e2_pre_block = PreBlock(n, B, bug)
        self._e3_conv_rl = ConvRL(2 * n, 2 * n, 3, stride=2)
        self._e3_pre_block = PreBlock(n, C, bug)
        self._t3_global_block = GlobalBlock(n)
        self._t3_pos_block = PosBlock(n, C)
        self._t3_conv = ConvRL(2 * n, 12, 3, relu=False)
        self._t2_conv_rl = ConvRL(2 * n + 3, 2 * n, 1)
        self._t2_global_block1 = GlobalBlock(n)
        self._t2_pre_block = PreBlock(n, B, bug)
        self._t2_global_block2 = GlobalBlock(n)
        self._t2_pos_block = PosBlock(n, B)
        self._t2_conv = ConvRL(2 * n, 12, 3, relu=False)
        self._t1_conv_rl = ConvRL(2 * n + 3, 2 * n, 1)
        if bug:  # the baseline's code, as the seed quotes it
            self._t1_global_block = GlobalBlock(n)
            self._t1_pre_block = PreBlock(n, A, bug)
            self._t1_global_block = GlobalBlock(n)
        else:
            self._t1_global_block1 = GlobalBlock(n)
            self._t1_pre_block = PreBlock(n, A, bug)
            self._t1_global_block2 = GlobalBlock(n)
        self._t1_pos_block = PosBlock(n, A)
        self._t1_conv = ConvRL(2 * n, 12, 3, relu=False)

    def forward(self, x):
        t1 = self._e1_pre_block(self._e1_conv_rl(space_to_depth(x)))
        t2 = self._e2_pre_block(self._e2_conv_rl(t1))
        t3 = self._e3_pre_block(self._e3_conv_rl(t2))
        t3 = self._t3_pos_block(self._t3_global_block(t3))
        out4 = depth_to_space(self._t3_conv(t3))
        u2 = self._t2_conv_rl(paddle.concat([out4, t2], axis=1))
        u2 = self._t2_global_block2(self._t2_pre_block(self._t2_global_block1(u2)))
        out2 = depth_to_space(self._t2_conv(self._t2_pos_block(u2)))
        u1 = self._t1_conv_rl(paddle.concat([t1, out2], axis=1))
        g1, g2 = (
            (self._t1_global_block, self._t1_global_block)
            if self.bugs
            else (self._t1_global_block1, self._t1_global_block2)
        )
        u1 = g2(self._t1_pre_block(g1(u1)))
        out1 = depth_to_space(self._t1_conv(self._t1_pos_block(u1)))
        return [out4, out2, out1]


# -- SSD-MobileNet-v1 (PaddleDetection names; TF "SAME" padding and ReLU6 as clearsight) ---
def _same_pad(x, k, s):
    pads = []
    for size in (x.shape[3], x.shape[2]):
        total = max((math.ceil(size / s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads) if any(pads) else x


class ConvBNLayer(nn.Layer):
    def __init__(self, cin, cout, k, stride=1, groups=1) -> None:
        super().__init__()
        self.k, self.s = k, stride
        self._conv = nn.Conv2D(cin, cout, k, stride=stride, groups=groups, bias_attr=False)
        self._batch_norm = nn.BatchNorm2D(cout)

    def forward(self, x):
        return F.relu6(self._batch_norm(self._conv(_same_pad(x, self.k, self.s))))


class DepthwiseSeparable(nn.Layer):
    def __init__(self, cin, cout, stride) -> None:
        super().__init__()
        self._depthwise_conv = ConvBNLayer(cin, cin, 3, stride, groups=cin)
        self._pointwise_conv = ConvBNLayer(cin, cout, 1)

    def forward(self, x):
        return self._pointwise_conv(self._depthwise_conv(x))


class ExtraBlock(nn.Layer):
    def __init__(self, cin, mid, cout) -> None:
        super().__init__()
        self.pointwise_conv = ConvBNLayer(cin, mid, 1)
        self.normal_conv = ConvBNLayer(mid, cout, 3, 2)

    def forward(self, x):
        return self.normal_conv(self.pointwise_conv(x))


_SSD_BLOCKS = (
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)  # fmt: skip
_SSD_NAMES = (
    "conv2_1", "conv2_2", "conv3_1", "conv3_2", "conv4_1", "conv4_2",
    "conv5_1", "conv5_2", "conv5_3", "conv5_4", "conv5_5", "conv5_6", "conv6",
)  # fmt: skip


class MobileNet(nn.Layer):
    def __init__(self, m: float) -> None:
        super().__init__()

        def d(c):
            return max(int(c * m), 16)

        self.conv1 = ConvBNLayer(3, d(32), 3, 2)
        self.blocks, cin = [], d(32)
        for name, (cout, s) in zip(_SSD_NAMES, _SSD_BLOCKS, strict=True):
            self.blocks.append(self.add_sublayer(name, DepthwiseSeparable(cin, d(cout), s)))
            cin = d(cout)
        self.extras = []
        for i, e in enumerate((512, 256, 256, 128)):
            self.extras.append(
                self.add_sublayer(f"conv7_{i + 1}", ExtraBlock(cin, d(e // 2), d(e)))
            )
            cin = d(e)
        self.channels = [d(512), d(1024)] + [d(e) for e in (512, 256, 256, 128)]

    def forward(self, x):
        x, feats = self.conv1(x), []
        for i, b in enumerate(self.blocks):
            x = b(x)
            if i == 10:
                feats.append(x)
        feats.append(x)
        for e in self.extras:
            x = e(x)
            feats.append(x)
        return feats


class SSDHead(nn.Layer):
    def __init__(self, channels, num_classes) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.boxes, self.scores = [], []
        for i, (c, a) in enumerate(zip(channels, (3, 6, 6, 6, 6, 6), strict=True)):
            self.boxes.append(self.add_sublayer(f"boxes{i}", nn.Conv2D(c, a * 4, 1)))
            self.scores.append(self.add_sublayer(f"scores{i}", nn.Conv2D(c, a * num_classes, 1)))

    def forward(self, feats):
        n, boxes, logits = feats[0].shape[0], [], []
        for f, b, s in zip(feats, self.boxes, self.scores, strict=True):
            boxes.append(b(f).transpose([0, 2, 3, 1]).reshape([n, -1, 4]))
            logits.append(s(f).transpose([0, 2, 3, 1]).reshape([n, -1, self.num_classes]))
        return paddle.concat(boxes, 1), paddle.concat(logits, 1)


class PaddleSSD(nn.Layer):
    def __init__(self, num_classes: int, depth_multiplier: float) -> None:
        super().__init__()
        self.backbone = MobileNet(depth_multiplier)
        self.ssd_head = SSDHead(self.backbone.channels, num_classes)

    def forward(self, x):
        return self.ssd_head(self.backbone(x))


# -- YOLOX-Nano (Megvii's names: BaseConv = conv + bn + SiLU) ----------------------------
class BaseConv(nn.Layer):
    def __init__(self, cin, cout, k, stride=1, groups=1) -> None:
        super().__init__()
        self.conv = nn.Conv2D(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias_attr=False)
        self.bn = nn.BatchNorm2D(cout)

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


class DWConv(nn.Layer):
    def __init__(self, cin, cout, k, stride=1) -> None:
        super().__init__()
        self.dconv = BaseConv(cin, cin, k, stride, groups=cin)
        self.pconv = BaseConv(cin, cout, 1)

    def forward(self, x):
        return self.pconv(self.dconv(x))


class Bottleneck(nn.Layer):
    def __init__(self, ch, shortcut) -> None:
        super().__init__()
        self.conv1, self.conv2, self.use_add = BaseConv(ch, ch, 1), DWConv(ch, ch, 3), shortcut

    def forward(self, x):
        y = self.conv2(self.conv1(x))
        return y + x if self.use_add else y


class CSPLayer(nn.Layer):
    def __init__(self, cin, cout, n, shortcut=True) -> None:
        super().__init__()
        h = cout // 2
        self.conv1, self.conv2, self.conv3 = (
            BaseConv(cin, h, 1),
            BaseConv(cin, h, 1),
            BaseConv(2 * h, cout, 1),
        )
        self.m = nn.Sequential(*[Bottleneck(h, shortcut) for _ in range(n)])

    def forward(self, x):
        return self.conv3(paddle.concat([self.m(self.conv1(x)), self.conv2(x)], axis=1))


class SPPBottleneck(nn.Layer):
    def __init__(self, cin, cout) -> None:
        super().__init__()
        self.conv1 = BaseConv(cin, cin // 2, 1)
        self.m = nn.LayerList([nn.MaxPool2D(k, 1, k // 2) for k in (5, 9, 13)])
        self.conv2 = BaseConv(cin // 2 * 4, cout, 1)

    def forward(self, x):
        x = self.conv1(x)
        return self.conv2(paddle.concat([x] + [p(x) for p in self.m], axis=1))


class Focus(nn.Layer):
    def __init__(self, cin, cout) -> None:
        super().__init__()
        self.conv = BaseConv(cin * 4, cout, 3)

    def forward(self, x):
        tl, bl = x[:, :, 0::2, 0::2], x[:, :, 1::2, 0::2]
        tr, br = x[:, :, 0::2, 1::2], x[:, :, 1::2, 1::2]
        return self.conv(paddle.concat([tl, bl, tr, br], axis=1))


class CSPDarknet(nn.Layer):
    def __init__(self, w) -> None:
        super().__init__()
        self.stem = Focus(3, w[0])
        self.dark2 = nn.Sequential(DWConv(w[0], w[1], 3, 2), CSPLayer(w[1], w[1], 1))
        self.dark3 = nn.Sequential(DWConv(w[1], w[2], 3, 2), CSPLayer(w[2], w[2], 3))
        self.dark4 = nn.Sequential(DWConv(w[2], w[3], 3, 2), CSPLayer(w[3], w[3], 3))
        self.dark5 = nn.Sequential(
            DWConv(w[3], w[4], 3, 2), SPPBottleneck(w[4], w[4]), CSPLayer(w[4], w[4], 1, False)
        )

    def forward(self, x):
        x = self.dark2(self.stem(x))
        p3 = self.dark3(x)
        p4 = self.dark4(p3)
        return p3, p4, self.dark5(p4)


class PAFPN(nn.Layer):
    def __init__(self, w) -> None:
        super().__init__()
        c2, c3, c4 = w[2:]
        self.backbone = CSPDarknet(w)
        self.lateral_conv0 = BaseConv(c4, c3, 1)
        self.C3_p4 = CSPLayer(2 * c3, c3, 1, False)
        self.reduce_conv1 = BaseConv(c3, c2, 1)
        self.C3_p3 = CSPLayer(2 * c2, c2, 1, False)
        self.bu_conv2 = DWConv(c2, c2, 3, 2)
        self.C3_n3 = CSPLayer(2 * c2, c3, 1, False)
        self.bu_conv1 = DWConv(c3, c3, 3, 2)
        self.C3_n4 = CSPLayer(2 * c3, c4, 1, False)

    def forward(self, x):
        def up(t):
            return F.interpolate(t, scale_factor=2, mode="nearest")

        x2, x1, x0 = self.backbone(x)
        f0 = self.lateral_conv0(x0)
        f_out0 = self.C3_p4(paddle.concat([up(f0), x1], axis=1))
        f1 = self.reduce_conv1(f_out0)
        p2 = self.C3_p3(paddle.concat([up(f1), x2], axis=1))
        p1 = self.C3_n3(paddle.concat([self.bu_conv2(p2), f1], axis=1))
        p0 = self.C3_n4(paddle.concat([self.bu_conv1(p1), f0], axis=1))
        return p2, p1, p0


class YOLOXHead(nn.Layer):
    def __init__(self, in_channels, hidden, num_classes) -> None:
        super().__init__()
        self.stems = nn.LayerList([BaseConv(c, hidden, 1) for c in in_channels])
        self.cls_convs = nn.LayerList(
            [
                nn.Sequential(DWConv(hidden, hidden, 3), DWConv(hidden, hidden, 3))
                for _ in in_channels
            ]
        )
        self.reg_convs = nn.LayerList(
            [
                nn.Sequential(DWConv(hidden, hidden, 3), DWConv(hidden, hidden, 3))
                for _ in in_channels
            ]
        )
        self.cls_preds = nn.LayerList([nn.Conv2D(hidden, num_classes, 1) for _ in in_channels])
        self.reg_preds = nn.LayerList([nn.Conv2D(hidden, 4, 1) for _ in in_channels])
        self.obj_preds = nn.LayerList([nn.Conv2D(hidden, 1, 1) for _ in in_channels])

    def forward(self, feats):
        outs = []
        for k, f in enumerate(feats):
            x = self.stems[k](f)
            cls = self.cls_preds[k](self.cls_convs[k](x))
            r = self.reg_convs[k](x)
            y = paddle.concat(
                [self.reg_preds[k](r), F.sigmoid(self.obj_preds[k](r)), F.sigmoid(cls)], axis=1
            )
            outs.append(y.flatten(2))
        return paddle.concat(outs, axis=2).transpose([0, 2, 1])


class PaddleYOLOXNano(nn.Layer):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        w = (16, 32, 64, 128, 256)
        self.backbone = PAFPN(w)
        self.head = YOLOXHead(w[2:], 64, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x))
