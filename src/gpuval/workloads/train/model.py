"""A small ResNet-style CNN and a synthetic, learnable image set generated on the fly from a fixed seed.

Each class is a fixed random template (from the seed); a sample is its class template plus noise. The network
can learn it within a few dozen steps, so the loss going down is a real check that gradients flow and the ranks
agree, without downloading a data set.
"""

from __future__ import annotations

import torch
from torch import nn


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and an identity (or 1x1 strided) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.shortcut = (nn.Identity() if stride == 1 and cin == cout
                         else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class SmallResNet(nn.Module):
    """Stem, one residual stage per width (each after the first halves the resolution), pooling, classifier."""

    def __init__(self, classes: int = 10, width: int = 16, stages: int = 2, channels: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                   nn.ReLU(inplace=True)]
        cin = width
        for stage in range(stages):
            cout = width * 2 ** stage
            layers.append(ResidualBlock(cin, cout, stride=1 if stage == 0 else 2))
            cin = cout
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class SyntheticImages:
    """Batches of (image, label): class template plus Gaussian noise, reproducible per (seed, rank, step)."""

    def __init__(self, seed: int, classes: int, image_size: int, channels: int = 3, noise: float = 1.0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.templates = torch.randn(classes, channels, image_size, image_size, generator=gen)
        self.seed, self.classes, self.noise = seed, classes, noise

    def batch(self, rank: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's batch for this step: every rank and step sees different samples."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + rank * 10_007 + step)
        labels = torch.randint(self.classes, (size,), generator=gen)
        images = self.templates[labels] + self.noise * torch.randn(self.templates[labels].shape, generator=gen)
        return images, labels
