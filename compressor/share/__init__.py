"""Parameter sharing: ALBERT-style cross-layer sharing, factorised embeddings. Arrives with its own issue."""
