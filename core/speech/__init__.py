"""Speech codes: the embedded k-means log-mel codec (fit on clips, encode, decode with Griffin-Lim),
its mini-batch k-means, and codec quality on clips. Imports only the core foundation; `core.data`
picks the clips of a manifest's splits (`core.data.codec_training`)."""
