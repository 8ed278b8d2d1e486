"""Fronde: route each request to the fastest llama.cpp speculative-decoding mode.

An OpenAI-compatible proxy over one llama-server per mode (baseline, ngram-simple,
ngram-mod, draft) that decides by measuring.
"""

__version__ = "0.1.0"
