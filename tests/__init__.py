"""LinguaForge tests (a regular package, so a site-packages `tests` package never shadows it)."""
