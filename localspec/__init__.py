"""localspec: fast, faithful speculative generation on consumer hardware.

A small draft GGUF model proposes, a large target GGUF model checks (llama.cpp through
llama-cpp-python); what the user sees is the target's answer, sooner.
"""

__version__ = "0.1.0"
