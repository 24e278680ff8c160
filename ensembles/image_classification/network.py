"""An Inception-style image classifier: NHWC ``[299, 299, 3]`` floats -> ``[1001]`` softmax.

Pretrained ImageNet weights cannot be fetched on this workplace, so by default the weights are
fixed and seeded (``torch.manual_seed``): the network is real (stem, two Inception blocks with
1x1 / 3x3 / double-3x3 / pool branches, a reduction, global pooling, a 1001-way classifier as
in the seeds' InceptionV3 graph) but its classes mean nothing. Pass a ``state_dict`` file to
``build_network(weights=...)`` to export your own trained weights instead.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

NUM_CLASSES = 1001  # ImageNet's 1000 classes plus "background", as the seeds' InceptionV3
IMAGE_SIZE = 299
SEED = 20240521
CLASSIFIER_STD = 1.0


def conv(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class InceptionBlock(nn.Module):
    """Four parallel branches concatenated on channels, as in InceptionV3's "mixed" blocks."""

    def __init__(self, cin: int, width: int) -> None:
        super().__init__()
        self.branch1 = conv(cin, width, 1)
        self.branch3 = nn.Sequential(conv(cin, width, 1), conv(width, width, 3))
        self.branch33 = nn.Sequential(conv(cin, width, 1), conv(width, width, 3),
                                      conv(width, width, 3))
        self.pool = nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), conv(cin, width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch3(x), self.branch33(x), self.pool(x)], 1)


class InceptionStyle(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            conv(3, 16, 3, stride=2),   # 150
            conv(16, 32, 3, stride=2),  # 75
            nn.MaxPool2d(3, stride=2, padding=1),  # 38
        )
        self.mixed1 = InceptionBlock(32, 16)  # 64 channels
        self.reduce = nn.Sequential(conv(64, 96, 3, stride=2), nn.MaxPool2d(2))  # 10
        self.mixed2 = InceptionBlock(96, 32)  # 128 channels
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2)  # the seeds feed NHWC, as DALI's HWC output
        x = self.mixed2(self.reduce(self.mixed1(self.stem(x))))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return torch.softmax(self.classifier(x), dim=1)


def build_network(weights: Path | None = None, seed: int = SEED) -> InceptionStyle:
    torch.manual_seed(seed)
    network = InceptionStyle()
    if weights is not None:
        state = torch.load(str(weights), map_location="cpu", weights_only=True)
        network.load_state_dict(state)
    else:
        # He initialisation keeps activations from shrinking layer after layer, and a wide
        # classifier makes the probabilities depend visibly on the image: a near-uniform softmax
        # would hide preprocessing mistakes from the reference checks.
        with torch.no_grad():
            for module in network.modules():
                if isinstance(module, nn.Conv2d):
                    nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            network.classifier.weight.normal_(0.0, CLASSIFIER_STD)
            network.classifier.bias.zero_()
    return network.eval()


def export_onnx(network: nn.Module, target: Path, input_name: str, output_name: str) -> Path:
    example = torch.rand((2, IMAGE_SIZE, IMAGE_SIZE, 3))
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        network, (example,), str(target), input_names=[input_name], output_names=[output_name],
        dynamic_shapes={"images": {0: torch.export.Dim("batch")}},
        dynamo=True, external_data=False, optimize=True, verbose=False,
    )
    return target
