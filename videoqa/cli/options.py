"""Command-line options shared by the subcommands that run the model, and the one path from them to a model.

`model_spec_from_args` turns the options into plain data (`VideoQA.from_spec` loads it): the same dict
loads the model here, is shipped to Ray actors, and is recorded with eval runs.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING

from ..errors import InputError, VideoQAError
from ..model import conversation_of
from ..pruning import FIELDS_USED, METHODS, PruneConfig

if TYPE_CHECKING:
    from ..batch.run import Produce
    from ..pipeline import VideoQA


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default="demo",
                   help="Hugging Face id or local folder of a Video-LLaVA checkpoint, or a model shipped with "
                        "videoqa: demo (the default) or demo-long; the real one is LanguageBind/Video-LLaVA-7B-hf")
    g.add_argument("--device", default=None, help="cuda, cuda:1, cpu, ... (default: cuda if available)")
    g.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="default: bfloat16 (or float16) on CUDA, float32 on CPU")
    g.add_argument("--attn", default="sdpa", choices=["sdpa", "flash_attention_2", "eager"],
                   help="attention kernel for every layer (default: sdpa)")
    g.add_argument("--frames", type=int, default=None,
                   help="frames to sample (default: 8, or chosen from the video's length with --r auto)")
    g.add_argument("--max-new-tokens", type=int, default=64,
                   help="answer length limit (default: 64; eval: 1024, as Video-LLaVA's evaluation)")
    g.add_argument("--prompt", default=None, choices=["plain", "official"],
                   help="prompt template: plain = 'USER: <video>\\n{question} ASSISTANT:'; official = the same after "
                        "the llava_v1 system preamble, as Video-LLaVA's evaluation (default: the conversation the "
                        "model was trained on, from its folder's videoqa.json; official for a checkpoint without one)")
    g.add_argument("--compile", action="store_true",
                   help="decode on a static KV cache with a torch.compile'd step (a CUDA graph on GPUs); the "
                        "first answer pays the compilation")


def add_prune_options(p: argparse.ArgumentParser, initial_only: bool = False) -> None:
    """The pruning options. An option the chosen method does not read is an error (it would be silently
    ignored), except with `initial_only`, where they are the web page's first settings."""
    g = p.add_argument_group("pruning")
    g.add_argument("--prune", default="fastv", choices=METHODS, help="pruning method (default: fastv)")
    # None: not given (the PruneConfig default applies), so a given option the method ignores is caught.
    g.add_argument("--k", type=int, default=None, help="FastV: prune after layer K-1 (default: 2)")
    g.add_argument("--r", default=None,
                   help="fraction of visual tokens to drop, in [0, 1), or 'auto' (default: auto)")
    g.add_argument("--rank-by", default=None, choices=["last", "text"],
                   help="FastV ranking query: the last prompt token (official code; default) or all text tokens")
    g.add_argument("--seed", type=int, default=None, help="seed of random pruning (default: 0)")
    g.add_argument("--keep-positions", action=argparse.BooleanOptionalAction, default=None,
                   help="pruning before the LLM: kept tokens keep their original RoPE positions, as FastV does "
                        "(default: on for fastvid, as its official code; off for vispruner/random, as theirs)")
    g.add_argument("--frame-floor", type=float, default=None, metavar="SHARE",
                   help="FastV: spread this share of the kept tokens evenly over the frames, the rest by score "
                        "(default: 0, FastV's global top-k)")
    p.set_defaults(prune_initial_only=initial_only)


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """Options of the commands that answer many questions (batch, eval): which engine, and resuming."""
    g = p.add_argument_group("engine")
    g.add_argument("--engine", default="local", choices=["local", "ray"],
                   help="local: one model in this process; ray: an actor pool on Ray (RAY_ADDRESS or a local Ray)")
    g.add_argument("--batch-size", type=positive_int, default=1,
                   help="questions per left-padded batch, locally or per Ray actor (GPU throughput; same answers "
                        "as 1)")
    g.add_argument("--actors", type=int, default=1, help="Ray: model replicas (one per actor; default 1)")
    g.add_argument("--cpus-per-actor", type=float, default=None,
                   help="Ray: CPUs each actor holds (default: 1, or an even share of what decoding leaves, so "
                        "--actors 2 fits a 2-CPU machine)")
    g.add_argument("--gpus-per-actor", type=float, default=None,
                   help="Ray: GPUs per actor, fractions allowed (0.5: two small models share a GPU; "
                        "default: 1 when the cluster has GPUs, else 0)")
    g.add_argument("--num-cpus", type=int, default=None,
                   help="Ray: CPUs of the local Ray started when no cluster address is given (default: all cores)")
    g.add_argument("--timeout", type=float, default=600.0,
                   help="Ray: seconds allowed to decode one clip before it is recorded as an error (default 600)")
    g.add_argument("--ray-address", default=None,
                   help="Ray cluster: ray://HOST:10001 (Ray Client) or HOST:PORT (default: $RAY_ADDRESS, else a "
                        "local Ray); token-auth clusters also need RAY_AUTH_MODE=token and RAY_AUTH_TOKEN")
    g.add_argument("--retry-errors", action="store_true", help="re-run items whose earlier record is an error")
    g.add_argument("--wait", action="store_true",
                   help="if another run is writing the same results, wait for it and then resume "
                        "(default: stop at once, naming that run)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


PRUNE_FLAGS = {"k": "--k", "r": "--r", "rank_by": "--rank-by", "seed": "--seed", "keep_positions": "--keep-positions",
               "frame_floor": "--frame-floor"}


def _flag(field: str, value) -> str:
    """How the user wrote an option: `--k 3`, `--keep-positions`, `--no-keep-positions`."""
    if isinstance(value, bool):
        return PRUNE_FLAGS[field] if value else "--no-" + PRUNE_FLAGS[field].removeprefix("--")
    return f"{PRUNE_FLAGS[field]} {value}"


def prune_from_args(args: argparse.Namespace) -> PruneConfig:
    given = {f: getattr(args, f) for f in PRUNE_FLAGS if getattr(args, f) is not None}
    ignored = [f for f in given if f not in FIELDS_USED[args.prune]]
    if ignored and not getattr(args, "prune_initial_only", False):
        shown = " ".join(_flag(f, given[f]) for f in ignored)
        users = [m for m in METHODS if set(ignored) <= set(FIELDS_USED[m])]
        hint = f"it applies to --prune {'/'.join(users)}" if users else "each applies to another method"
        raise InputError(f"{shown}: not used by --prune {args.prune} ({hint}); drop it or change the method")
    return PruneConfig(method=args.prune, **given).validate()


def model_spec_from_args(args: argparse.Namespace) -> dict:
    """What `VideoQA.from_spec` needs, as plain data (it is shipped to Ray actors and recorded)."""
    return {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "attn_implementation": args.attn,
        "prune": asdict(prune_from_args(args)),
        "frames": args.frames,
        "max_new_tokens": args.max_new_tokens,
        "prompt": args.prompt or _conversation(args.model),
        "decode": "compiled" if args.compile else "eager",
    }


def _conversation(model: str) -> str | None:
    """The model's own conversation, recorded with the run; None when the name does not resolve (loading it then
    says why, after the checks that come first)."""
    try:
        return conversation_of(model)
    except VideoQAError:
        return None


def load_qa(args: argparse.Namespace) -> VideoQA:
    """The model the options describe (loaded once; their pruning is its default)."""
    from ..pipeline import VideoQA

    return VideoQA.from_spec(model_spec_from_args(args))


def engine_from_args(args: argparse.Namespace) -> Produce:
    """The batch engine the options ask for; nothing is loaded until it is given work."""
    spec = model_spec_from_args(args)
    if args.engine == "ray":
        from ..batch.ray_engine import RayOptions, ray_engine

        opts = RayOptions(actors=args.actors, cpus_per_actor=args.cpus_per_actor, gpus_per_actor=args.gpus_per_actor,
                          timeout_s=args.timeout, address=args.ray_address, num_cpus=args.num_cpus,
                          batch_size=args.batch_size)
        return ray_engine(spec, opts)
    from ..batch.local import local_engine

    return local_engine(spec, args.batch_size)
