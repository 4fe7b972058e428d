"""Batch QA over many clips: one JSONL record per (clip, question), resumable, locally or on Ray.

    worklist    which (clip, question) pairs to answer, and their keys
    store       the results file: durable appends, reading back after a kill, compaction
    lock        one writer per results file (an OS lock held for the whole run)
    run         resume/retry planning, one record per item, the summary
    local       the in-process back ends (one at a time, or left-padded batches)
    ray_backend  the Ray Data back end (CPU decoding tasks + an actor pool of models)
"""
