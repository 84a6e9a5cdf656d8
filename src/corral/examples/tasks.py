"""The example models as warm-switchable tasks (see :mod:`corral.train.task`).

``digits``, ``tiny_transformer``, ``resnet50`` and ``bert_base`` build a model, its
optimiser and a ``step(n)`` whose batch depends only on ``n``, so a job
switched in and out of a worker any number of times computes what an
uninterrupted run computes. ``resnet50`` is ResNet-50's architecture (25.6
million parameters, bottleneck blocks [3, 4, 6, 3]) on small synthetic
images: the model size the switching benchmark needs, without downloads.
``bert_base`` is BERT-base's layout (12 encoder layers of width 768, 12
heads, 3072 wide feed-forward, a 30,522-token vocabulary tied to the output:
108.6 million parameters, BERT-base's 110 million less its segment
embeddings, pooler and 384 of its 512 positions) learning to fill masked
tokens of synthetic sequences; with PipeSwitch's ResNet-50 it is the pair of
models a switch is measured on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from corral.examples.loop import batch_rng
from corral.train.checkpoint import Stateful


def device_of(model: nn.Module) -> torch.device:
    """Where the model is now: a warm worker may have moved it since it was built."""
    return next(model.parameters()).device


@dataclass
class LoopTask:
    """A model, its optimiser and a step function: the :class:`~corral.train.task.Task` shape."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_of_step: Any
    step_time: float = 0.0
    """Extra seconds per step (a larger model), as the scripts' ``--step-time``."""

    @property
    def objects(self) -> dict[str, Stateful]:
        return {"model": self.model, "optimizer": self.optimizer}

    def step(self, step: int) -> float:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_of_step(step)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # between steps a job holds no gradients:
        # nothing for a warm switch to move, nor for a parked job to keep
        if self.step_time > 0:
            time.sleep(self.step_time)
        return float(loss.item())


def digits(seed: int = 0, lr: float = 3e-3, batch: int = 64, step_time: float = 0.0) -> LoopTask:
    from corral.examples.digits_cnn import DigitsCNN
    from corral.examples.digits_data import load_digits_arrays

    images, target = load_digits_arrays()
    x = torch.tensor(images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(target, dtype=torch.long)
    torch.set_num_threads(1)  # small models: one thread is fastest, and results reproduce
    torch.manual_seed(seed)
    model = DigitsCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()

    def loss_of_step(step: int) -> torch.Tensor:
        pick = torch.as_tensor(batch_rng(seed, step).choice(len(y), batch, replace=False))
        device = device_of(model)
        return loss_fn(model(x[pick].to(device)), y[pick].to(device))

    return LoopTask(model, optimizer, loss_of_step, step_time)


def tiny_transformer(seed: int = 0, lr: float = 3e-3) -> LoopTask:
    from corral.examples.tiny_transformer import BATCH, VOCAB, TinyTransformer, sequences

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = TinyTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()

    def loss_of_step(step: int) -> torch.Tensor:
        tokens = sequences(batch_rng(seed, step), BATCH).to(device_of(model))
        logits = model(tokens[:, :-1])
        return loss_fn(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))

    return LoopTask(model, optimizer, loss_of_step)


class Bottleneck(nn.Module):
    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False),
            nn.BatchNorm2d(out),
        )
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or inputs != out:
            self.skip = nn.Sequential(
                nn.Conv2d(inputs, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


class ResNet50(nn.Module):
    """ResNet-50's layout: a 7x7 stem, bottleneck stages [3, 4, 6, 3], 1000 classes."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        ]
        inputs = 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for k in range(blocks):
                layers.append(Bottleneck(inputs, width, stride if k == 0 else 1))
                inputs = width * 4
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inputs, classes)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def resnet50(seed: int = 0, lr: float = 0.01, batch: int = 2, size: int = 64) -> LoopTask:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = ResNet50()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def loss_of_step(step: int) -> torch.Tensor:
        # Synthetic images made where the model is, from the step alone: a large batch
        # costs no host time, so on a GPU a step is the model's own compute.
        device = device_of(model)
        generator = torch.Generator(device=device)
        generator.manual_seed(int(batch_rng(seed, step).integers(2**62)))
        images = torch.randn((batch, 3, size, size), generator=generator, device=device)
        labels = torch.randint(0, 1000, (batch,), generator=generator, device=device)
        return loss_fn(model(images), labels)

    return LoopTask(model, optimizer, loss_of_step)


class BertBase(nn.Module):
    """BERT-base's encoder with a masked-token head (no pre-training, no downloads)."""

    def __init__(
        self, vocab: int = 30522, width: int = 768, layers: int = 12, length: int = 128
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.randn(length, width) * 0.02)
        layer = nn.TransformerEncoderLayer(
            width, nhead=max(width // 64, 1), dim_feedforward=4 * width, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        self.head.weight = self.embed.weight  # tied, as BERT's output embedding is

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.encoder(h))


def bert_base(
    seed: int = 0,
    lr: float = 1e-4,
    batch: int = 32,
    length: int = 128,
    layers: int = 12,
    width: int = 768,
) -> LoopTask:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    vocab = 30522
    model = BertBase(vocab, width, layers, length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()

    def loss_of_step(step: int) -> torch.Tensor:
        # sequences made where the model is, from the step alone (as resnet50's images);
        # 15% of the tokens masked (token 0) and predicted
        device = device_of(model)
        generator = torch.Generator(device=device)
        generator.manual_seed(int(batch_rng(seed, step).integers(2**62)))
        tokens = torch.randint(1, vocab, (batch, length), generator=generator, device=device)
        masked = torch.rand((batch, length), generator=generator, device=device) < 0.15
        logits = model(tokens.masked_fill(masked, 0))
        return loss_fn(logits[masked], tokens[masked])

    return LoopTask(model, optimizer, loss_of_step)
