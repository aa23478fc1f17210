"""Speech codes: the embedded k-means log-mel codec (train, encode, decode with Griffin-Lim), its
mini-batch k-means, and codec quality on held-out clips. Imports only the core foundation."""
