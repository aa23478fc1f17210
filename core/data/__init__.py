"""Datasets: the manifest format, importers and the espeak sample, deterministic splits, prompt
pairs, and the fingerprinted preprocessing cache that turns clips into text ids and speech codes.
Imports the core foundation, `core.tokenizers` and `core.speech`."""
