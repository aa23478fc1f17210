"""`export --checkpoint CKPT --output DIR`: the family's native files plus `linguaforge.json`."""

from __future__ import annotations

import argparse

from core.cli.common import Result, add_command, name_arg
from core.tables import render_mapping
from core.config import load_settings
from core.paths import CLI_PATH


def _export(args: argparse.Namespace) -> Result:
    """Write a trained checkpoint in its family's native layout.

    chatterbox: t3_<name>.safetensors (loads strictly into T3(T3Config(text_tokens_dict_size=V))), the
    tokenizer JSON <name>.json and linguaforge.json (metadata, vocabulary size, language tags, how to load).
    indextts: gpt_<name>.pth (accepted by IndexTTS2's load_checkpoint + UnifiedVoice), config.yaml with
    gpt.number_text_tokens and the tokenizer path corrected, <name>.model and linguaforge.json.
    With families.<family>.model_dir set, the folder also carries the published model folder's other files
    (hard links) and speak_indextts2.py / speak_chatterbox.py: the published inference classes speak from it
    (docs/guides/published-export.md).
    LinguaForge's own checkpoints: use `prune`.
    --merge (adapter checkpoints of `adapter: {kind: lora}` runs, every family): merged.safetensors + peft_adapter/.
    --hub-card: README.md, a Hugging Face model card from the checkpoint's own quality report (eval.json), the
    base release and revision it was pulled at, tokenizer, languages, data hours and steps, and the exact
    `hf upload` command. --push OWNER/NAME: the card, then the folder uploaded with huggingface_hub (refused
    in one line, before any work, without a configured token).
    """
    from core.checkpoint import load_checkpoint
    from core.errors import InputError
    from core.families.registry import get_model_family

    settings = load_settings()
    checkpoint = settings.resolve(args.checkpoint)
    output = settings.resolve(args.output)
    if args.hub_card or args.push:  # refused before any file is written
        from core.model_card import card_entry, check_push

        card_entry(checkpoint)
        if args.push:
            check_push(args.push, output)
    meta = load_checkpoint(checkpoint).meta or {}
    family = meta.get("family")
    if not family:
        raise InputError(f"{checkpoint}: no LinguaForge metadata names its family; export a checkpoint written by `train`.")
    if meta.get("adapter") or args.merge:
        if not args.merge:
            raise InputError(f"{checkpoint} is a LoRA adapter checkpoint (adapter weights and new rows only); export it with --merge.")
        from core.training.adapter import export_merged

        written = export_merged(checkpoint, output, args.name, settings)
    else:
        written = get_model_family(family).export(checkpoint, output, args.name, settings)
    if args.hub_card or args.push:
        from core.model_card import push_export, write_model_card

        written.append(write_model_card(checkpoint, output, settings, args.push))
    report = {"family": family, "files": [str(p) for p in written]}
    if args.push:
        report["pushed"] = push_export(output, args.push)
    return Result(report, render_mapping({"family": family, **{p.name: str(p) for p in written}}))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `export` command."""
    parser = add_command(subparsers, "export", _export)
    parser.add_argument("--checkpoint", required=True, type=CLI_PATH, help="training checkpoint (.pt) of a family run")
    parser.add_argument("--output", required=True, type=CLI_PATH, help="output folder")
    parser.add_argument("--name", default=None, type=name_arg("--name"), help="name in the file names (default: the tokenizer's stem)")
    parser.add_argument("--merge", action="store_true",
                        help="an adapter checkpoint: merge the LoRA into its base (merged.safetensors, loads strictly into the "
                             "published class; plus the family's native files) and write peft_adapter/ for peft users")
    parser.add_argument("--hub-card", action="store_true",
                        help="write README.md, a Hugging Face model card from the checkpoint's quality report, with the hf upload command")
    parser.add_argument("--push", metavar="OWNER/NAME", help="write the card and upload the folder to this Hub repository "
                                                              "(needs a token: hf auth login or HF_TOKEN)")
