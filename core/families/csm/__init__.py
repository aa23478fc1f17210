"""Sesame CSM (transformers' `CsmForConditionalGeneration` with its Mimi codec) as a LinguaForge model family."""
