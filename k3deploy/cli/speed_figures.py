"""The guide's measured serving speeds, by config, to check a bring-up against.

Only one config has a figure: "A documented 4x8 H100 deployment measured single-stream decode
at 5.8 tok/s and 14.0 tok/s aggregate across four concurrent streams" (H100 PCIe-NVLink
nodes; "SXM5 with a full NVLink mesh should do somewhat better"), SGLang with the marlin
W4A16 MoE kernel on the mxfp4 checkpoint. The GB300 figure (423 tok/s) is with speculative
decoding on hardware k3deploy does not size, so it is left out.
"""

from __future__ import annotations

from typing import TypedDict

from k3deploy.cluster.inventory import Inventory
from k3deploy.serving.bench_stats import LevelSummary


class GuideFigure(TypedDict):
    single_stream_tok_s: float
    aggregate_tok_s: dict[int, float]   # concurrency -> output tokens/s
    note: str


class AggregateVsGuide(TypedDict):
    concurrency: int
    guide_tok_s: float
    measured_tok_s: float
    ratio: float


class VsGuide(TypedDict):
    """The bench's figures beside the guide's, as `bench` prints and keeps them."""
    guide_single_stream_tok_s: float
    measured_single_stream_tok_s: float
    ratio: float
    far_below: bool
    note: str
    aggregate: list[AggregateVsGuide]


FIGURES: dict[tuple[str, int, int, str], GuideFigure] = {
    # (gpu, nodes, gpus per node, precision): figures
    ("h100", 4, 8, "mxfp4"): {
        "single_stream_tok_s": 5.8, "aggregate_tok_s": {4: 14.0},
        "note": "the guide's 4x8 H100 (PCIe-NVLink) measurement; SXM5 should do somewhat better",
    },
}
FAR_BELOW = 0.5   # below half the guide's figure the bring-up is wrong, not just slower


def for_inventory(inv: Inventory) -> GuideFigure | None:
    return FIGURES.get((inv.gpu.model, len(inv.nodes), inv.gpu.count, inv.model.precision))


def compare(figure: GuideFigure | None, single_tok_s: float | None,
            levels: list[LevelSummary] | None = None) -> VsGuide | None:
    """Measured single-stream decode (and aggregate output at the concurrency the guide
    measured, when the bench ran it) against the guide's, where the guide gives a figure."""
    if figure is None or not single_tok_s:
        return None
    ratio = single_tok_s / figure["single_stream_tok_s"]
    out: VsGuide = {"guide_single_stream_tok_s": figure["single_stream_tok_s"],
                    "measured_single_stream_tok_s": round(single_tok_s, 2), "ratio": round(ratio, 2),
                    "far_below": ratio < FAR_BELOW, "note": figure["note"], "aggregate": []}
    for level in levels or []:
        guide = figure["aggregate_tok_s"].get(level["concurrency"])
        if guide:
            out["aggregate"].append({"concurrency": level["concurrency"], "guide_tok_s": guide,
                                     "measured_tok_s": level["output_tok_s"],
                                     "ratio": round(level["output_tok_s"] / guide, 2)})
    return out
