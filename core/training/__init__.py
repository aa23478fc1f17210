"""Training: the run config, embedding surgery between tokenizers, the trainer recipe and its
components (data and batching, freezing, optimiser, checkpoints and resume, logging, memory
estimate, periodic eval) and pruning a checkpoint for inference. Imports the core foundation,
`core.tokenizers`, `core.data`, `core.families`, `core.eval` and `core.checks` (the trainer runs the doctor)."""
