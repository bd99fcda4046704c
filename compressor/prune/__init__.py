"""Pruning: attention heads, FFN neurons, whole layers, unstructured weights (mask, then materialise). Arrives with its own issue."""
