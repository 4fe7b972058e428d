"""Benchmarks behind `videoqa bench`, one module per suite.

    llm       LLM prefill/decode time, ranking share and cache size per method (`llm` and `frames` suites)
    memory    peak memory of one prefill per method, each in a fresh process
    video     frame-sampling backends
    accuracy  the demo model's held-out accuracy for every method and R
"""
