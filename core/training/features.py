"""A run's feature cache without training: what `train` builds first, for `preprocess --config`.

`build_run_features` plans the run config as `train` does (`core.training.plan`), loads its tokenizer,
base checkpoint and codec, and asks the family for its feature cache — all clips, or one shard on one
device (`core.data.shards`), so a family's features can be built on several devices or machines
before training starts. `train` then finds the cache complete and reuses it.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.config import load_settings
from core.data.cache import SHARED_INDEX_FORMATS
from core.data.feature_cache import CacheInfo, open_cache
from core.data.shards import Shard
from core.errors import InputError
from core.tokenizers.tokenizer import load_tokenizer
from core.training.plan import plan_run
from core.training.run_config import load_run_config


def build_run_features(config_path: str | os.PathLike[str], shard: Shard | None = None,
                       device: str | None = None) -> CacheInfo:
    """Build (or complete) the feature cache of the run config at `config_path`; return the engine's report.

    `shard` builds that shard only; `device` runs the family's feature models there (None: the
    family's default). Raises InputError for a run config, tokenizer, checkpoint or model folder that
    does not load, and for a run that reads no feature cache (a language-model run).
    """
    settings = load_settings()
    config = load_run_config(config_path, settings)
    if not config.tokenizer:
        raise InputError(f"{config.source}: `tokenizer` is not set; name the tokenizer file the features' text ids come from.")
    plan = plan_run(config, settings, config_path)
    family = plan.family
    base = family.load_state_dict(plan.base_checkpoint) if plan.base_checkpoint else None
    run = plan.family_run(load_tokenizer(plan.tokenizer_path), base)
    run.feature_shard, run.feature_device = shard, device
    run.codec = family.load_codec(run)
    cache_dir = family.prepare_features(run)
    if cache_dir is None:
        raise InputError(f"{config.source}: a {config.task} run of family {family.name} reads no feature cache; "
                         "there is nothing to preprocess.")
    return run.feature_build or _imported(Path(cache_dir))


def _imported(cache_dir: Path) -> CacheInfo:
    """Return the report of a cache the family took as it is (an imported feature folder): nothing built."""
    index = open_cache(cache_dir, SHARED_INDEX_FORMATS)
    return CacheInfo(index.path, index.data["fingerprint"], len(index.items), 0, len(index.items), 0,
                     list(index.data.get("skipped", [])))
