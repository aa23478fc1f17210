"""Training: the run config, embedding surgery between tokenizers, the trainer recipe and its
components (data and batching, freezing, optimiser, checkpoints and resume, logging, memory
estimate, periodic eval) and pruning a checkpoint for inference. Imports every other core package."""
