"""Training metrics summed on the device between log lines, so a step never waits for the host.

`MetricWindow.add` keeps per-step values as device tensors (no `.item()`); `read` brings the
window's means to the host in one transfer at `log_every`. Its state (the sums so far) travels in
checkpoints, so a run resumed mid-window logs exactly what the uninterrupted run logs.
"""

from __future__ import annotations

import torch


class MetricWindow:
    """Sums of per-step metrics (float64, on their device) and the number of steps they cover."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.steps = 0

    def add(self, metrics: dict[str, torch.Tensor]) -> None:
        """Add one step's metrics (0-d tensors); never synchronises."""
        for name, value in metrics.items():
            value = value.detach().to(torch.float64)
            self.sums[name] = self.sums[name] + value if name in self.sums else value
        self.steps += 1

    def read(self, reset: bool = True) -> dict[str, float]:
        """Return the mean of each metric over the window (one device-to-host transfer).

        `reset` starts a new window; without it the window goes on (a log line off the
        `log_every` grid, such as the last step of a paused run, leaves the grid's windows intact).
        """
        names = list(self.sums)
        values = torch.stack([self.sums[n] for n in names]).tolist() if names else []
        means = {name: value / max(self.steps, 1) for name, value in zip(names, values)}
        if reset:
            self.sums, self.steps = {}, 0
        return means

    def state_dict(self) -> dict:
        """Return the sums so far as plain numbers, with the steps they cover."""
        names = list(self.sums)
        values = torch.stack([self.sums[n] for n in names]).tolist() if names else []
        return {"sums": dict(zip(names, values)), "steps": self.steps}

    def load_state_dict(self, state: dict, device: torch.device) -> None:
        """Continue a window saved by `state_dict` (sums put back on `device`)."""
        self.sums = {n: torch.tensor(v, dtype=torch.float64, device=device) for n, v in state.get("sums", {}).items()}
        self.steps = int(state.get("steps", 0))
