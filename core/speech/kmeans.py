"""Mini-batch k-means (Sculley 2010) with k-means++ seeding, on the GPU when one is present."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from core.errors import InputError

SEED_SAMPLE = 32768


@dataclass
class KMeansResult:
    """Centroids [k, dim] (float32, CPU) and fit statistics."""

    centroids: torch.Tensor
    inertia: float
    dead: int
    iterations: int
    device: str


def pick_device(device: str | None = None) -> torch.device:
    """Return `device`, or CUDA when available, else CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def assign(data: torch.Tensor, centroids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (nearest centroid index, squared distance) for each row of `data`."""
    distance = (centroids**2).sum(1).unsqueeze(0) - 2.0 * (data @ centroids.T)
    best, index = distance.min(dim=1)
    return index, (best + (data**2).sum(1)).clamp_min(0.0)


def _plus_plus(data: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    sample = data[torch.randperm(data.shape[0], generator=generator, device="cpu")[:SEED_SAMPLE].to(data.device)]
    centroids = torch.empty(k, data.shape[1], device=data.device)
    centroids[0] = sample[torch.randint(sample.shape[0], (1,), generator=generator).item()]
    closest = ((sample - centroids[0]) ** 2).sum(1)
    for i in range(1, k):
        weights = closest.cpu() + 1e-12
        pick = torch.multinomial(weights / weights.sum(), 1, generator=generator).item()
        centroids[i] = sample[pick]
        closest = torch.minimum(closest, ((sample - centroids[i]) ** 2).sum(1))
    return centroids


def fit_kmeans(
    data: torch.Tensor, k: int, iterations: int = 100, batch_size: int = 4096, seed: int = 0, device: str | None = None,
    on_iteration: Callable[[], None] = lambda: None,
) -> KMeansResult:
    """Return k centroids of the rows of `data` [n, dim] by mini-batch k-means (`on_iteration` is called after each).

    Centroids that receive no frames are re-seeded from random frames. Raises InputError when
    there are fewer rows than k.
    """
    if data.shape[0] < k:
        raise InputError(f"only {data.shape[0]} frames for a codebook of {k}; use more audio or a smaller --codebook-size.")
    target = pick_device(device)
    generator = torch.Generator().manual_seed(seed)
    points = data.to(target, torch.float32)
    centroids = _plus_plus(points, k, generator)
    counts = torch.zeros(k, device=target)
    batch = min(batch_size, points.shape[0])
    for _ in range(iterations):
        rows = points[torch.randperm(points.shape[0], generator=generator)[:batch].to(target)]
        index, _ = assign(rows, centroids)
        batch_counts = torch.bincount(index, minlength=k).to(torch.float32)
        sums = torch.zeros_like(centroids).index_add_(0, index, rows)
        counts += batch_counts
        hit = batch_counts > 0
        rate = (batch_counts[hit] / counts[hit]).unsqueeze(1)
        centroids[hit] += rate * (sums[hit] / batch_counts[hit].unsqueeze(1) - centroids[hit])
        on_iteration()
    index, distance = _assign_all(points, centroids)
    usage = torch.bincount(index, minlength=k)
    dead = usage == 0
    if bool(dead.any()):
        refill = torch.randperm(points.shape[0], generator=generator)[: int(dead.sum())].to(target)
        centroids[dead] = points[refill]
        index, distance = _assign_all(points, centroids)
        usage = torch.bincount(index, minlength=k)
    return KMeansResult(
        centroids=centroids.cpu(),
        inertia=float(distance.mean()),
        dead=int((usage == 0).sum()),
        iterations=iterations,
        device=str(target),
    )


def _assign_all(points: torch.Tensor, centroids: torch.Tensor, chunk: int = 65536) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [assign(points[i : i + chunk], centroids) for i in range(0, points.shape[0], chunk)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
