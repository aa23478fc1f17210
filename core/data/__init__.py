"""Datasets: the manifest format, importers and the espeak sample, deterministic splits, prompt
pairs, the embedded codec fit on a manifest's train split and measured on its val split
(`codec_training.py`), and the fingerprinted preprocessing cache that turns clips into text ids and
speech codes. Imports the core foundation, `core.tokenizers` and `core.speech`."""
