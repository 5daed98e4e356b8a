"""Benchmarks: localspec vs AR vs llama.cpp's own tools, in the shape of the papers' tables."""
