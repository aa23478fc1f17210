"""A Hub dataset imported by id (`dataset import --format hf --input hf:owner/name:config@split`): memory and
time as the split grows.

Renders espeak clips once, then for each `--rows` count (default 200 and 2,000: the same clips cycled, each
row its own file name and speaker) builds the split as a cached Hub dataset under its own temporary HF_HOME
(`tests.hub_helpers.cache_hub_dataset`: `datasets`' parquet builder, in the layout `load_dataset` reads
offline) and imports it by id with HF_HUB_OFFLINE=1 in a fresh `python -m core` process. While it runs, its
/proc/<pid>/status is read every 20 ms: VmHWM (peak resident set: what `ru_maxrss` reports), and the peaks of
RssAnon (the process's own memory) and RssFile (file pages mapped and resident, the arrow file's among them).
Those are the importing process's (with `--workers` above 1, its pool workers convert `CLIPS_PER_TASK` clips a task).
The point: the peaks stay flat while the split grows 10×.

    nice -n 19 .venv/bin/python bench/hub_dataset_import.py --rows 200 2000 --json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.common import bench_parser  # noqa: E402
from bench.preprocess import commit  # noqa: E402
from core.data.manifest import read_manifest  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from tests.hub_helpers import cache_hub_dataset  # noqa: E402

RATE = 16000
REPO, CONFIG, SPLIT = "bench/speech", "am", "train"
POLL_S = 0.02
STATUS_FIELDS = ("VmHWM", "RssAnon", "RssFile")


def build_split(work: Path, sources: list[Any], rows: int) -> Path:
    """Write `rows` rows cycling `sources` (their wav bytes, text, speaker) as the cached Hub dataset under
    `work/hf`; return HF_HOME."""
    audio = {row.id: row.path.read_bytes() for row in sources}
    picked = [sources[i % len(sources)] for i in range(rows)]
    columns = {"audio": [{"bytes": audio[row.id], "path": f"row{i:06d}.wav"} for i, row in enumerate(picked)],
               "text": [row.text for row in picked], "speaker": [row.speaker for row in picked]}
    cache_hub_dataset(work / "hf", REPO, CONFIG, SPLIT, columns)
    return work / "hf"


def status_kib(pid: int) -> dict[str, int] | None:
    """Return {field: KiB} of STATUS_FIELDS from /proc/<pid>/status, or None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except (FileNotFoundError, ProcessLookupError):
        return None
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in STATUS_FIELDS:
            values[name] = int(rest.split()[0])
    return values if len(values) == len(STATUS_FIELDS) else None


def import_by_id(hf_home: Path, workspace: Path, output: Path, workers: int) -> dict[str, Any]:
    """Import the split by id in a fresh process converting in `workers` processes; return its summary, wall seconds and peak memory (MiB)."""
    workspace.mkdir(parents=True)
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", LINGUAFORGE_WORKSPACE=str(workspace))
    env.pop("HF_DATASETS_CACHE", None)
    command = [sys.executable, "-m", "core", "dataset", "import", "--format", "hf",
               "--input", f"hf:{REPO}:{CONFIG}@{SPLIT}", "--output", str(output), "--speaker-column", "speaker",
               "--language", CONFIG, "--workers", str(workers), "--json"]
    peaks = dict.fromkeys(STATUS_FIELDS, 0)
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        while proc.poll() is None:
            values = status_kib(proc.pid)
            if values is not None:
                peaks = {name: max(peaks[name], values[name]) for name in STATUS_FIELDS}
            time.sleep(POLL_S)
        stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the import failed ({proc.returncode}): {stderr.strip()}")
    summary = json.loads(stdout)
    return {"kept": summary["kept"], "rejected": summary["rejected"], "wall_s": round(wall, 1),
            "peak_rss_mib": round(peaks["VmHWM"] / 1024, 1), "peak_rss_anon_mib": round(peaks["RssAnon"] / 1024, 1),
            "peak_rss_file_mib": round(peaks["RssFile"] / 1024, 1)}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[200, 2000], help="split sizes (rows), in order")
    parser.add_argument("--workers", type=int, default=1, help="the import's conversion processes (1: none started)")
    parser.add_argument("--per-language", type=int, default=24, help="espeak clips rendered (Amharic, two voices)")
    args = parser.parse_args()
    result: dict[str, Any] = {"commit": commit(), "cpus": os.cpu_count(), "workers": args.workers, "splits": []}
    with tempfile.TemporaryDirectory(prefix="lf-hubbench-") as tmp:
        work = Path(tmp)
        sources = read_manifest(sample_dataset(work / "espeak", RATE, [CONFIG], args.per_language).manifest)[0]
        for rows in args.rows:
            folder = work / f"rows{rows}"
            hf_home = build_split(folder, sources, rows)
            arrow = sum(p.stat().st_size for p in (hf_home / "datasets").rglob("*.arrow"))
            load = round(os.getloadavg()[0], 2)
            figures = import_by_id(hf_home, folder / "workspace", folder / "workspace" / "datasets" / "imported",
                                   args.workers)
            result["splits"].append({"rows": rows, "split_mib": round(arrow / 2**20, 1), "load_before": load,
                                     **figures, "load_after": round(os.getloadavg()[0], 2)})
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"commit {result['commit']}, {result['cpus']} CPUs")
    for split in result["splits"]:
        print(f"{split['rows']:>6} rows ({split['split_mib']} MiB): {split['wall_s']} s, peak RSS {split['peak_rss_mib']} MiB "
              f"(anon {split['peak_rss_anon_mib']}, file {split['peak_rss_file_mib']}), kept {split['kept']}, "
              f"load {split['load_before']} → {split['load_after']}")


if __name__ == "__main__":
    main()
