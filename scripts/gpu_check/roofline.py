"""Device peaks, FLOPs and bytes per sample, and where a measured rate sits on the roofline.

FLOPs per sample come from torch's own counter (``torch.utils.flop_counter.FlopCounterMode``,
which counts 2 FLOPs per multiply-add of convolutions and matrix products). Bytes per sample are
an estimate of unfused DRAM traffic: every leaf module reads its inputs and weights and writes
its outputs once (at the dtype the forward runs in); fusion (compile) moves less.

Peaks are the vendors' dense figures (NVIDIA H100 and H200 datasheets): tensor-core bf16
without sparsity, fp32 without tensor cores (the fp32 path with TF32 off; cuDNN's TF32
convolutions reach the TF32 figure), and HBM bandwidth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


@dataclass(frozen=True)
class Peaks:
    name: str
    bf16_tflops: float
    tf32_tflops: float
    fp32_tflops: float
    hbm_tb_s: float


PEAKS = (
    Peaks("H100 SXM", 989.0, 494.0, 67.0, 3.35),
    Peaks("H100 PCIe", 756.0, 378.0, 51.0, 2.0),
    Peaks("H100 NVL", 835.0, 418.0, 60.0, 3.9),
    Peaks("H200", 989.0, 494.0, 67.0, 4.8),
)


def device_peaks(device_name: str) -> Peaks | None:
    """The peaks of a device by its CUDA name ("NVIDIA H100 80GB HBM3" is the SXM part)."""
    name = device_name.upper()
    if "H200" in name:
        return PEAKS[3]
    if "H100" in name:
        if "PCIE" in name:
            return PEAKS[1]
        if "NVL" in name:
            return PEAKS[2]
        return PEAKS[0]
    return None


def flops_per_sample(model: nn.Module, shape: tuple[int, ...], device: torch.device) -> float:
    """Forward FLOPs of one sample, by torch's FLOP counter on a batch of 2."""
    x = torch.rand((2, *shape), device=device)
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(x)
    return counter.get_total_flops() / 2


def bytes_per_sample(
    model: nn.Module, shape: tuple[int, ...], device: torch.device, element_bytes: int
) -> float:
    """Unfused traffic estimate of one sample: leaf modules' inputs + outputs, plus all weights
    once per batch of ``batch`` samples (amortised, so left out here)."""
    total = 0

    def hook(_module: nn.Module, inputs: tuple, output: object) -> None:
        nonlocal total
        for t in (*inputs, output):
            if isinstance(t, torch.Tensor):
                total += t.numel() // t.shape[0] * element_bytes

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with torch.inference_mode():
            model(torch.rand((1, *shape), device=device))
    finally:
        for handle in handles:
            handle.remove()
    return float(total)


def roofline(
    samples_per_s: float, flops: float, traffic: float, peaks: Peaks | None, precision: str
) -> dict[str, float | str | None]:
    """Achieved TFLOP/s and TB/s, and the % of the binding roofline (compute or memory)."""
    achieved_tflops = samples_per_s * flops / 1e12
    achieved_tb_s = samples_per_s * traffic / 1e12
    out: dict[str, float | str | None] = {
        "tflops": achieved_tflops,
        "tb_s": achieved_tb_s,
        "intensity_flop_per_byte": flops / traffic if traffic else None,
        "binding": None,
        "roofline_pct": None,
    }
    if peaks is None:
        return out
    peak = {"bf16": peaks.bf16_tflops, "fp16": peaks.bf16_tflops, "tf32": peaks.tf32_tflops}.get(
        precision, peaks.fp32_tflops
    )
    memory_bound = flops / traffic * peaks.hbm_tb_s if traffic else float("inf")
    attainable = min(peak, memory_bound)
    out["binding"] = "compute" if peak <= memory_bound else "memory"
    out["roofline_pct"] = 100 * achieved_tflops / attainable
    out["peak_tflops"] = peak
    return out


def peaks_dict(peaks: Peaks | None) -> dict[str, float | str] | None:
    return None if peaks is None else asdict(peaks)
