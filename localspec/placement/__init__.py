"""Where a model's layers go and what that costs (a room of its own, no llama_cpp here).

    layout.py  what a model costs in memory: bytes per layer (GGUF header), KV, buffers
    plan.py    the pure planner: devices x layer sizes x KV needs -> a Placement per model
    load.py    LoadOptions: how one model is loaded (-ngl, -dev, -ts, threads, ...)

backend/offload.py turns a plan into llama.cpp's model parameters.
"""
