"""PARSE, the lossy whole-answer method (docs/parse.md): its round loop (`loop.py`), the one
judge pass over an answer and its prefixes (`one_pass.py`), the judges (`judges.py`), the
segmenter that places cuts (`segment.py`) and the judge calibration probe (`probe.py`).
Its lossless finish runs through the one loop (decode/speculative.drive)."""
