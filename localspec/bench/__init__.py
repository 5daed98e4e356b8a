"""Benchmarks: localspec vs AR vs llama.cpp's own tools, in the shape of the papers' tables.

runner.py is the one way a bench measures a generation (Spec -> Run, via the public Session
API, the llama.cpp peer on the same prompt); speed.py and tables.py plan runs and summarize
them; peer.py / llama_bench.py drive llama.cpp's binaries; parse/ is `bench parse` (PARSE
on HumanEval, humaneval.py); ar.py and verify_speed.py are the small single-purpose benches.
"""
