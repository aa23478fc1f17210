"""Training: the run config and the run's plan (`plan.py`), embedding surgery between tokenizers, the
trainer and its components (data and batching, freezing, optimiser, checkpoints and resume, logging,
memory estimate, periodic eval) and pruning a checkpoint for inference. Imports the core foundation,
`core.tokenizers`, `core.data`, `core.families` and `core.eval`, never `core.checks`: the doctor is
handed to the trainer as its preflight by `core.recipe` (train = plan → doctor → run)."""
