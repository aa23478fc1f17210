"""The dataset filters' names and thresholds (light: the CLI parser imports it; the filters are in `core.data.filters`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core.errors import InputError

FILTERS = ("duration", "clipping", "snr", "silence", "text", "speech_rate", "duplicate")


@dataclass
class FilterConfig:
    """Filter thresholds; a filter named in `off` is skipped.

    `keep_silence`: seconds of leading/trailing silence left after trimming (longer silence is cut).
    `rate_factor`: a clip is a speech-rate outlier when its characters per second of speech lie
    outside [median / factor, median × factor] of the dataset. `near_duplicate`: largest fingerprint
    bit error rate between two clips counted as the same recording.
    """

    min_duration: float = 0.5
    max_duration: float = 20.0
    max_clipping: float = 0.001
    min_snr: float = 15.0
    keep_silence: float = 0.3
    rate_factor: float = 2.5
    near_duplicate: float = 0.2
    off: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        unknown = [name for name in self.off if name not in FILTERS]
        if unknown:
            raise InputError(f"filter {unknown[0]!r}: unknown. Choose from {', '.join(FILTERS)}.")
        if self.min_duration >= self.max_duration:
            raise InputError(f"filter min duration {self.min_duration} must be below max duration {self.max_duration}.")
        if self.rate_factor <= 1.0:
            raise InputError(f"speech-rate factor {self.rate_factor}: must be above 1 (2.5 keeps clips within 2.5× the median).")

    def on(self, name: str) -> bool:
        """Return whether filter `name` runs."""
        return name not in self.off

    def record(self) -> dict[str, Any]:
        """Return the thresholds and the filters switched on and off, for the dataset's record."""
        return {**asdict(self), "on": [name for name in FILTERS if self.on(name)]}
