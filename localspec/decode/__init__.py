"""Decoding loops: drive backend contexts and verifiers, yield Events, never print."""
