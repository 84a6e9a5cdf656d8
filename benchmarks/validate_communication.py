"""The communication model against Pollux's placement measurements; writes
docs/validation/communication.md.

What it checks:

* **Fit**: ``perf.communication.calibrate`` on every step time Pollux
  measured (6 models, up to 16 GPUs over 4 nodes of 4 T4s): the fitted
  effective bandwidths and latencies, and per model the relative error of the
  predicted step time on every multi-GPU sample.
* **Locality**: what the simulator uses, the slowdown of a placement against
  the same GPU count on one node at the same local batch, predicted against
  measured (every placement of 2-4 GPUs over 2-4 nodes).
* **Architectures**: predicted sync time of ResNet-50 and BERT on 8 machines
  x 4 GPUs by ring all-reduce, parameter servers and BytePS with spare CPU
  machines, against BytePS' analytic claim (with as many CPU machines as GPU
  machines, half of all-reduce's traffic per machine).

    python benchmarks/validate_communication.py [--out FILE] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from validation_io import notes_for


def run() -> dict[str, Any]:
    from corral.model.cluster import LINK_PRESETS, Links
    from corral.perf.communication import GRADIENT_BYTES, Span, Sync, calibrate, sync_time
    from corral.perf.pollux_models import POLLUX_MODELS, step_samples

    fit = calibrate()
    # out of sample: every other multi-GPU placement (in sorted order) left out of the fit
    placements = sorted({s.per_node for m in POLLUX_MODELS for s in step_samples(m)})
    rank = {p: k for k, p in enumerate(placements)}
    split = calibrate(held_out=lambda s: s.replicas > 1 and rank[s.per_node] % 2 == 1)
    models: dict[str, Any] = {}
    for model in POLLUX_MODELS:
        prof = fit.profiles[model]
        errors = np.abs(fit.errors[model])
        held = np.abs(split.held_out_errors[model])
        by: dict[tuple[tuple[int, ...], int], list[float]] = defaultdict(list)
        for s in step_samples(model):
            by[(s.per_node, s.local_bsz)].append(s.step_time)
        factor_errors, measured_factors, examples = [], [], []
        for (per_node, batch), times in sorted(by.items()):
            n = sum(per_node)
            base = by.get(((n,), batch))
            if len(per_node) < 2 or n > 4 or not base:
                continue
            measured = min(1.0, float(np.mean(base)) / float(np.mean(times)))
            predicted = min(
                1.0,
                prof.step_time(Span((n,)), fit.links, local_batch=batch)
                / prof.step_time(Span(per_node), fit.links, local_batch=batch),
            )
            factor_errors.append(predicted - measured)
            measured_factors.append(measured)
            if batch == prof.typical_batch or (
                per_node in ((1, 1), (2, 2), (1, 1, 1, 1)) and not examples
            ):
                examples.append(
                    {
                        "placement": "".join(map(str, per_node)),
                        "batch": batch,
                        "measured": measured,
                        "predicted": predicted,
                    }
                )
        fe = np.abs(np.array(factor_errors))
        models[model] = {
            "gradient_mb": prof.gradient_bytes / 1e6,
            "gradient_source": "published" if model in GRADIENT_BYTES else "fitted",
            "overlap": prof.overlap,
            "compute_fixed_s": prof.compute_fixed,
            "compute_per_sample_ms": prof.compute_per_sample * 1e3,
            "compute_error_median": float(np.median(np.abs(fit.compute_errors[model]))),
            "samples": len(errors),
            "step_error_median": float(np.median(errors)),
            "step_error_p90": float(np.percentile(errors, 90)),
            "fit_half_samples": len(split.errors[model]),
            "held_out_samples": len(held),
            "held_out_error_median": float(np.median(held)),
            "held_out_error_p90": float(np.percentile(held, 90)),
            "placements": len(fe),
            "factor_measured_median": float(np.median(measured_factors)),
            "factor_error_median": float(np.median(fe)),
            "factor_error_p90": float(np.percentile(fe, 90)),
            "examples": [e for e in examples if e["placement"] in ("11", "22", "1111", "13")][:4],
        }

    links = fit.links
    eight = Span((4,) * 8)
    archs: list[dict[str, Any]] = []
    for model in ("imagenet", "bert"):
        g = fit.profiles[model].gradient_bytes
        ring = sync_time(g, eight, links)
        for label, sync in [
            ("ring all-reduce", Sync()),
            ("parameter servers, 1", Sync("ps", 1)),
            ("parameter servers, 8", Sync("ps", 8)),
            ("BytePS, 0 CPU machines", Sync("byteps", 1, 0)),
            ("BytePS, 4 CPU machines", Sync("byteps", 1, 4)),
            ("BytePS, 8 CPU machines", Sync("byteps", 1, 8)),
        ]:
            t = sync_time(g, eight, links, sync)
            step = fit.profiles[model].step_time(eight, links, sync)
            archs.append(
                {"model": model, "sync": label, "sync_s": t, "vs_ring": t / ring, "step_s": step}
            )
    nvlink = Links(**{**links.__dict__, "intra_node": LINK_PRESETS["nvlink"]})
    what_if = []
    for model in POLLUX_MODELS:
        prof = fit.profiles[model]
        for span in (Span((4,)), Span((4, 4))):
            what_if.append(
                {
                    "model": model,
                    "placement": "".join(map(str, span.per_node)),
                    "pcie_s": prof.step_time(span, links),
                    "nvlink_s": prof.step_time(span, nvlink),
                }
            )
    return {
        "links": links.__dict__,
        "defaults": Links().__dict__,
        "models": models,
        "architectures": archs,
        "nvlink": what_if,
    }


def render(r: dict[str, Any]) -> str:
    links, d = r["links"], r["defaults"]
    out = [
        "# The communication model against Pollux's measurements",
        "",
        "Written by `benchmarks/validate_communication.py`; the model is "
        "`corral.perf.communication` (its docstring states the formulas). Data: Pollux's "
        "artifact, every step time it measured for six models on 1-16 NVIDIA T4 GPUs over "
        "1-4 nodes of 4 (placements and scalability runs).",
        "",
        "## Fitted links",
        "",
        "| link | fitted | corral's default |",
        "|---|---:|---:|",
        f"| inside a node (PCIe) | {links['intra_node']:.2f} GB/s | {d['intra_node']:.2f} GB/s |",
        f"| between nodes | {links['cross_node']:.3f} GB/s | {d['cross_node']:.3f} GB/s |",
        f"| between racks | not measured | {d['cross_rack']:.3f} GB/s (half, assumed) |",
        f"| latency per hop in a node | {links['intra_latency'] * 1e3:.2f} ms | "
        f"{d['intra_latency'] * 1e3:.2f} ms |",
        f"| latency per hop between nodes | {links['net_latency'] * 1e3:.2f} ms | "
        f"{d['net_latency'] * 1e3:.2f} ms |",
        "",
        "The effective rates are far below the nominal ones (the testbed's 50 Gb/s "
        "network is 6.25 GB/s; PCIe 3 x16 about 16 GB/s): they are what PyTorch's "
        "all-reduce achieved there, with published gradient sizes. A cluster spec may "
        "give its own (`links:` in the YAML; `intra_node: nvlink` names a preset).",
        "",
        "## Fit per model",
        "",
        "Step-time error: |predicted / measured - 1| over every multi-GPU sample. Locality "
        "error: |predicted - measured| of the speed factor of a placement over 2-4 nodes "
        "against the same GPUs on one node at the same local batch (the figure the "
        "simulator uses), with the measured factor's median for scale.",
        "",
        "| model | gradient | overlap p | 1-GPU compute error | samples | step error median | "
        "p90 | placements | measured factor (median) | factor error median | p90 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, m in r["models"].items():
        out.append(
            f"| {model} | {m['gradient_mb']:.0f} MB ({m['gradient_source']}) | "
            f"{m['overlap']:.2f} | {m['compute_error_median']:.1%} | {m['samples']} | "
            f"{m['step_error_median']:.1%} | {m['step_error_p90']:.1%} | {m['placements']} | "
            f"{m['factor_measured_median']:.2f} | {m['factor_error_median']:.3f} | "
            f"{m['factor_error_p90']:.3f} |"
        )
    out += [
        "",
        "### Out of sample",
        "",
        "The fit above is scored on the samples it was fitted to. Here every other "
        "multi-GPU placement (placements in sorted order, e.g. `22` in, `13` out) is "
        "left out: links, overlaps and gradient sizes are fitted on the rest, and the "
        "step-time error is measured on placements the fit never saw.",
        "",
        "| model | fitted on | in-sample error median | held out | held-out error median | p90 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for model, m in r["models"].items():
        if "held_out_samples" not in m:
            continue
        out.append(
            f"| {model} | {m['fit_half_samples']} | {m['step_error_median']:.1%} "
            f"| {m['held_out_samples']} | {m['held_out_error_median']:.1%} "
            f"| {m['held_out_error_p90']:.1%} |"
        )
    out += [
        "",
        "Examples at each model's median local batch (speed factor against one node):",
        "",
        "| model | placement | local batch | measured | predicted |",
        "|---|---|---:|---:|---:|",
    ]
    for model, m in r["models"].items():
        for e in m["examples"]:
            out.append(
                f"| {model} | {e['placement']} | {e['batch']} | {e['measured']:.2f} | "
                f"{e['predicted']:.2f} |"
            )
    out += [
        "",
        "## Architectures (8 machines x 4 GPUs, fitted links)",
        "",
        "| model | sync | sync s | vs ring | step s |",
        "|---|---|---:|---:|---:|",
    ]
    for a in r["architectures"]:
        out.append(
            f"| {a['model']} | {a['sync']} | {a['sync_s']:.3f} | {a['vs_ring']:.2f} | "
            f"{a['step_s']:.3f} |"
        )
    out += [
        "",
        "## What NVLink would buy (fitted network, intra-node preset `nvlink`)",
        "",
        "| model | placement | step s over PCIe | over NVLink |",
        "|---|---|---:|---:|",
    ]
    for w in r["nvlink"]:
        out.append(f"| {w['model']} | {w['placement']} | {w['pcie_s']:.3f} | {w['nvlink_s']:.3f} |")
    out.append("")
    out += notes_for(__file__)
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/validation/communication.md")
    parser.add_argument("--json", default="docs/validation/data/communication-results.json")
    parser.add_argument("--from-json", default=None)
    args = parser.parse_args()
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
    else:
        result = run()
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    Path(args.out).write_text(render(result), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
