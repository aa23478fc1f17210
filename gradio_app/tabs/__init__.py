"""One module per dashboard tab; each exposes `build(ctx, demo)` that lays out its components inside a `gr.Tab`."""
