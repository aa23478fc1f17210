"""What every benchmark script shares: its command line's description and `--json` flag, and the GPUs' peak FLOP/s for MFU."""

from __future__ import annotations

import argparse
from typing import Any

# Peak dense bf16 tensor TFLOP/s by a substring of the device name (vendor data sheets, SXM parts).
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0}


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """Return an argument parser described by the benchmark's docstring, with the shared `--json` flag."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def peak_tflops(device: Any, override: float | None) -> float | None:
    """Return the peak dense bf16 TFLOP/s used for MFU: `override`, else by the CUDA device's name, else None."""
    if override is not None:
        return override
    if device.type != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), None)
