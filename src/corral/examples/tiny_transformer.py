"""A tiny causal transformer learning generated text: arithmetic token sequences.

Each sequence is ``a, a+d, a+2d, ...`` modulo the vocabulary, with ``a`` and
``d`` drawn at random; once the model has seen two tokens the rest is
predictable, so the next-token loss falls from ln(V) towards ln(V-1)/(L-1).
``python -m corral.examples.tiny_transformer --steps 300`` runs on a CPU in
seconds.
"""

from __future__ import annotations

import math
import sys

import torch
from torch import nn

from corral.examples.loop import batch_rng, device_of, parse_args, train

VOCAB, LENGTH, BATCH, WIDTH = 17, 12, 32, 32


def sequences(rng: object, n: int) -> torch.Tensor:
    start = torch.as_tensor(rng.integers(0, VOCAB, n))  # type: ignore[attr-defined]
    stride = torch.as_tensor(rng.integers(1, VOCAB, n))  # type: ignore[attr-defined]
    t = torch.arange(LENGTH)
    return (start[:, None] + stride[:, None] * t[None, :]) % VOCAB


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.randn(LENGTH, WIDTH) * 0.02)
        layer = nn.TransformerEncoderLayer(
            WIDTH, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(LENGTH - 1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        h = self.embed(tokens) + self.position[:n]
        mask = self.get_buffer("mask")
        return self.head(self.encoder(h, mask=mask[:n, :n], is_causal=True))


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(__doc__ or "", steps=300, argv=argv)
    device = device_of(args)
    torch.manual_seed(args.seed)
    model = TinyTransformer().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    held_out = sequences(batch_rng(args.seed, -1 % 2**31), 256).to(device)

    def loss_of(batch: torch.Tensor) -> torch.Tensor:
        logits = model(batch[:, :-1])
        return loss_fn(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))

    def train_step(step: int, size: int) -> torch.Tensor:
        return loss_of(sequences(batch_rng(args.seed, step), size).to(device))

    def evaluate() -> dict[str, float]:
        loss = float(loss_of(held_out))
        return {"train_loss": loss, "test_loss": loss, "uniform_loss": math.log(VOCAB)}

    return train(args, model, optimizer, train_step, evaluate, BATCH)


if __name__ == "__main__":
    main(sys.argv[1:])
