"""Command-line options shared by every subcommand that runs the model (ask, batch, eval, serve, bench)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from .pruning import METHODS, PruneConfig


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default="demo",
                   help="Hugging Face id or local folder of a Video-LLaVA checkpoint, or 'demo' for the model "
                        "shipped in samples/ (default: demo; the real one is LanguageBind/Video-LLaVA-7B-hf)")
    g.add_argument("--device", default=None, help="cuda, cuda:1, cpu, ... (default: cuda if available)")
    g.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="default: bfloat16 (or float16) on CUDA, float32 on CPU")
    g.add_argument("--attn", default="sdpa", choices=["sdpa", "flash_attention_2", "eager"],
                   help="attention kernel for every layer (default: sdpa)")
    g.add_argument("--frames", type=int, default=None,
                   help="frames to sample (default: 8, or chosen from the video's length with --r auto)")
    g.add_argument("--max-new-tokens", type=int, default=64)


def add_prune_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pruning")
    g.add_argument("--prune", default="fastv", choices=METHODS, help="pruning method (default: fastv)")
    g.add_argument("--k", type=int, default=2, help="FastV: prune after layer K-1 (default: 2)")
    g.add_argument("--r", default="auto",
                   help="fraction of visual tokens to drop, in [0, 1), or 'auto' (default: auto)")
    g.add_argument("--rank-by", default="last", choices=["last", "text"],
                   help="FastV ranking query: the last prompt token (official code) or all text tokens")
    g.add_argument("--seed", type=int, default=0, help="seed of random pruning")
    g.add_argument("--keep-positions", action="store_true",
                   help="vispruner/random: kept tokens keep their original RoPE positions (as FastV does)")


def prune_from_args(args: argparse.Namespace) -> PruneConfig:
    return PruneConfig(method=args.prune, k=args.k, r=args.r, rank_by=args.rank_by, seed=args.seed,
                       keep_positions=args.keep_positions).validate()


def model_kwargs_from_args(args: argparse.Namespace) -> dict:
    """What `VideoQA.from_pretrained` needs, as plain data (it is shipped to Ray actors and recorded)."""
    return {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "attn_implementation": args.attn,
        "prune": asdict(prune_from_args(args)),
        "frames": args.frames,
        "max_new_tokens": args.max_new_tokens,
    }


def load_qa_from_kwargs(kwargs: dict):
    """Load the pipeline `model_kwargs_from_args` describes (model loaded once; pruning as its default)."""
    from .pipeline import VideoQA

    kw = dict(kwargs)
    kw["prune"] = PruneConfig(**kw["prune"]).validate()
    return VideoQA.from_pretrained(kw.pop("model"), **kw)


def load_qa(args: argparse.Namespace):
    return load_qa_from_kwargs(model_kwargs_from_args(args))
