"""The examples' ``--batch-scale`` and ``--device``: a run at k times the batch, as a
scheduler that gave the job k GPUs would give it, with AdaScale's base batch
kept (``benchmarks/adascale_steps.py`` measures steps to the same loss on them)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from corral.examples import loop  # noqa: E402
from corral.examples.tiny_transformer import main as transformer  # noqa: E402


def run(argv: list[str]) -> tuple[list[int], list[float], dict[str, object]]:
    """Train a one-weight model; returns the batch of each step and the learning rate
    each optimiser step used."""
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    sizes: list[int] = []
    rates: list[float] = []

    def step(n: int, size: int) -> torch.Tensor:
        sizes.append(size)
        rates.append(optimizer.param_groups[0]["lr"])
        rng = loop.batch_rng(0, n)
        x = torch.as_tensor(rng.normal(size=(size, 1)), dtype=torch.float32)
        y = 3 * x + torch.as_tensor(rng.normal(size=(size, 1)), dtype=torch.float32)
        return ((model(x) - y) ** 2).mean()

    args = loop.parse_args("", steps=30, argv=[*argv, "--checkpoint-every", "1e9"])
    metrics = loop.train(args, model, optimizer, step, lambda: {"test_loss": 0.0}, batch=8)
    return sizes, rates, metrics


def test_a_scaled_batch_trains_at_k_times_the_batch_and_adascale_raises_the_rate() -> None:
    sizes, rates, metrics = run(["--device", "cpu"])
    assert set(sizes) == {8} and set(rates) == {0.01}
    assert "recent_loss" in metrics  # what --target-loss compares, for the benchmark
    sizes, rates, _ = run(["--batch-scale", "4", "--noise-every", "1", "--adascale"])
    # the training steps at 32 (the noise estimate's half batches at 16 between them)
    assert max(sizes) == 32 and set(sizes) == {16, 32}
    # the rate is the base rate times a gain in (1, 4] once the noise is measured
    assert rates[0] == 0.01 and 0.01 < max(rates) <= 0.04 + 1e-9
    sizes, rates, _ = run(["--batch-scale", "4"])  # no AdaScale: the base rate throughout
    assert set(sizes) == {32} and set(rates) == {0.01}


def test_the_device_option_puts_the_model_where_asked() -> None:
    args = loop.parse_args("", steps=1, argv=["--device", "cpu"])
    assert loop.device_of(args) == torch.device("cpu")
    auto = loop.parse_args("", steps=1, argv=[])
    assert loop.device_of(auto).type == ("cuda" if torch.cuda.is_available() else "cpu")
    metrics = transformer(["--steps", "3", "--device", "cpu", "--checkpoint-every", "1e9"])
    assert metrics["final_step"] == 3
