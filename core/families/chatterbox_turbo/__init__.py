"""Chatterbox-Turbo and Nano (GPT-2 T3, one-step meanflow S3Gen) as a LinguaForge model family."""
