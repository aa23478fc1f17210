"""`models pull NAME`: a published release from the Hugging Face Hub into a model folder of the workspace."""

from __future__ import annotations

import argparse

from core.cli.common import Result, add_command, add_group
from core.config import load_settings
from core.paths import CLI_PATH
from core.tables import render_mapping


def _pull(args: argparse.Namespace) -> Result:
    """Pull a published release (chatterbox, chatterbox:v3, chatterbox:english, chatterbox-turbo, chatterbox-nano,
    csm, indextts2, or hf:owner/repo[@revision] of their repositories) into a model folder.

    Only the files the family reads are fetched, into your Hugging Face cache (resumable; HF_HOME says where);
    with HF_HUB_OFFLINE=1 the cache alone answers. The folder (default workspace/models/NAME) gets hard links
    to the cached files, is checked by content, and records the repositories, revisions and sha256s in
    hub_release.json; every checkpoint trained from it carries that record. Use the folder as `model_dir:`.
    """
    from core.hub import pull_release, read_release_record

    folder = pull_release(args.release, load_settings(), output=args.output, revision=args.revision)
    record = read_release_record(folder) or {}
    shown = {"release": record.get("label"), "folder": str(folder), "content": record.get("content")}
    shown.update({source["repo"]: f"{source['revision']} ({len(source['files'])} files)" for source in record.get("sources", [])})
    return Result({"folder": str(folder), **record}, render_mapping(shown))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `models` group with its `pull` command."""
    group = add_group(subparsers, "models", "published model releases from the Hugging Face Hub")
    parser = add_command(group, "pull", _pull)
    # `release` (shown as NAME): a job's `name` parameter is a run name, one path segment, and `chatterbox:v3` is not
    # the names of core.families.releases.RELEASES, written out: importing it here would import torch for every command
    parser.add_argument("release", metavar="NAME", help="chatterbox | chatterbox:v3 | chatterbox:english | chatterbox-turbo | chatterbox-nano | "
                                     "csm | indextts2 | hf:owner/repo[@revision]")
    parser.add_argument("--revision", help="branch, tag or commit of the release's repository (default: main)")
    parser.add_argument("--output", type=CLI_PATH, help="model folder to fill (default: workspace/models/NAME)")
