"""What the base language kept through a fine-tune, in one word: `kept`, `degraded` or `lost`.

The verdict reads two measures of the base language, each optional: the relative change of its
validation loss over the fine-tune, and the relative drop of its held-out sentences' identification
(DTW identification, or 1 − WER / CER where measured) from the base checkpoint to the fine-tuned one.
Identification is judged only when the base checkpoint read its sentences above chance — a base that
never read has nothing to keep, and the verdict says so instead of calling that a loss.

`kept`: every measured change within the KEPT limits. `lost`: any beyond the LOST limits. `degraded`:
between. `unmeasured`: neither measure present. The thresholds travel with every verdict.
"""

from __future__ import annotations

from typing import Any

KEPT_LOSS_RISE = 0.10  # validation loss at most +10 % over the fine-tune
KEPT_IDENTIFICATION_DROP = 0.10  # identification at most 10 % lower (relative) than the base checkpoint's
LOST_LOSS_RISE = 0.50  # more than +50 %: the language is lost
LOST_IDENTIFICATION_DROP = 0.50  # more than half of what the base read is gone
THRESHOLDS = {"kept_loss_rise": KEPT_LOSS_RISE, "kept_identification_drop": KEPT_IDENTIFICATION_DROP,
              "lost_loss_rise": LOST_LOSS_RISE, "lost_identification_drop": LOST_IDENTIFICATION_DROP}
VERDICTS = ("kept", "degraded", "lost", "unmeasured")


def _grade(value: float, kept: float, lost: float) -> str:
    return "kept" if value <= kept else "lost" if value > lost else "degraded"


def retention_verdict(language: str, loss_change: float | None = None, identification_before: float | None = None,
                      identification_after: float | None = None, chance: float | None = None) -> dict[str, Any]:
    """Return the verdict on the base language `language`: `verdict` (kept | degraded | lost | unmeasured),
    `words` (one plain sentence with the figures and the limits), `loss_change`, `identification_drop`
    (relative, None when not judged), `identification_note` (why identification was not judged) and
    `thresholds`. `loss_change` is (end − start) / start of its validation loss; the identifications are the
    base checkpoint's and the fine-tuned one's on the same held-out sentences, `chance` theirs by guessing."""
    grades: list[str] = []
    parts: list[str] = []
    if loss_change is not None:
        loss_change = round(loss_change, 4)
        grades.append(_grade(loss_change, KEPT_LOSS_RISE, LOST_LOSS_RISE))
        parts.append(f"validation loss {loss_change:+.0%} (kept up to +{KEPT_LOSS_RISE:.0%}, lost beyond "
                     f"+{LOST_LOSS_RISE:.0%})")
    drop = None
    note = None
    if identification_before is not None and identification_after is not None:
        floor = chance or 0.0
        if identification_before <= floor * 2:
            note = (f"the base model identified {identification_before:.2f} of its sentences, no better than chance "
                    f"({floor:.2f}): it did not read them, so there was nothing to keep")
        else:
            change = (identification_after - identification_before) / identification_before
            drop = round(max(0.0, -change), 4)
            grades.append(_grade(drop, KEPT_IDENTIFICATION_DROP, LOST_IDENTIFICATION_DROP))
            parts.append(f"held-out sentences identified {identification_before:.2f} → {identification_after:.2f} "
                         f"({change:+.0%}; kept down to −{KEPT_IDENTIFICATION_DROP:.0%}, lost beyond "
                         f"−{LOST_IDENTIFICATION_DROP:.0%})")
    if not grades:
        verdict = "unmeasured"
    else:
        verdict = "lost" if "lost" in grades else "degraded" if "degraded" in grades else "kept"
    words = f"{language}: {verdict}" + (": " + "; ".join(parts) if parts else "") + (f" ({note})" if note else "") + "."
    return {"language": language, "verdict": verdict, "words": words, "loss_change": loss_change,
            "identification_drop": drop, "identification_note": note,
            "thresholds": dict(THRESHOLDS)}
