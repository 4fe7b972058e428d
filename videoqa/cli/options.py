"""Command-line options shared by the subcommands that run the model, and the one path from them to a model.

`model_spec_from_args` turns the options into plain data (`VideoQA.from_spec` loads it): the same dict
loads the model here, is shipped to Ray actors, and is recorded with eval runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InputError, ModelLoadError
from ..model import resolve_model
from ..model_card import ModelCard
from ..model_policy import ModelPolicy, model_policy
from ..models.families import card_of, family_at
from ..models.loaded import conversation_of
from ..pruning import AUTO, REGISTRY, PruneConfig, parse_r
from ..video.samplers import SAMPLERS

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
    g.add_argument("--frames", type=positive_int, default=None,
                   help="frames to sample (default: 8, or chosen from the video's length with --r auto)")
    g.add_argument("--sampler", default=None, choices=list(SAMPLERS),
                   help="where the frames are taken: uniform = evenly spaced (Video-LLaVA's); content = half of them "
                        "evenly, the rest where the video changes (default: the model's, from its videoqa.json; "
                        "uniform without one)")
    g.add_argument("--max-new-tokens", type=positive_int, default=64,
                   help="answer length limit (default: 64; eval: 1024, as Video-LLaVA's evaluation)")
    g.add_argument("--prompt", default=None, choices=["plain", "official"],
                   help="prompt template: plain = 'USER: <video>\\n{question} ASSISTANT:'; official = the same after "
                        "the llava_v1 system preamble, as Video-LLaVA's evaluation (default: the conversation the "
                        "model was trained on, from its folder's videoqa.json; official for a checkpoint without one)")
    g.add_argument("--compile", action="store_true",
                   help="decode on a static KV cache with a torch.compile'd step (a CUDA graph on GPUs); the "
                        "first answer pays the compilation")
    g.add_argument("--prefix-cache-bytes", type=non_negative_int, default=None, metavar="BYTES",
                   help="memory for each clip's prompt prefix, reused by its later questions (default: 1 GiB on a "
                        "CPU, a quarter of the free memory on a GPU; 0: off, every question prefilled whole)")


def add_prune_options(p: argparse.ArgumentParser, initial_only: bool = False) -> None:
    """The pruning options: --prune, --r and every option a registered method declares. An option the chosen
    method does not read is an error (it would be silently ignored), except with `initial_only`, where they
    are the web page's first settings."""
    g = p.add_argument_group("pruning")
    methods = "; ".join(f"{m.name}: {m.help}" for m in REGISTRY)
    g.add_argument("--prune", default="fastv", choices=REGISTRY.names(),
                   help=f"pruning method (default: fastv). {methods}")
    # None: not given (the method's default applies), so a given option the method ignores is caught.
    g.add_argument("--r", default=None,
                   help="fraction of visual tokens to drop, in [0, 1), or 'auto' (default: auto)")
    for option in REGISTRY.options().values():
        users = [REGISTRY.get(name) for name in REGISTRY.users(option.name)]
        defaults = {m.name: m.option(option.name).default for m in users}
        if len(set(defaults.values())) > 1:  # e.g. --keep-positions: each method's own rule
            users_text = "; ".join(f"{name}: default {_shown(value)}" for name, value in defaults.items())
        else:
            users_text = ", ".join(defaults)
        help_text = f"{option.help} [{users_text}]"
        if option.type is bool:
            g.add_argument(option.flag, dest=option.name, action=argparse.BooleanOptionalAction, default=None,
                           help=help_text)
        else:
            g.add_argument(option.flag, dest=option.name, type=option.type, default=None, choices=option.choices,
                           metavar=option.metavar, help=help_text)
    p.set_defaults(prune_initial_only=initial_only)


def _shown(value) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option: accepted, stored under the new option's name, with a note on stderr."""

    def __init__(self, option_strings, dest, preferred: str, **kwargs):
        self.preferred = preferred
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"videoqa: {option_string} is deprecated, use {self.preferred}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_backend_options(p: argparse.ArgumentParser) -> None:
    """Options of the commands that answer many questions (batch, eval): which back end, and resuming."""
    g = p.add_argument_group("back end")
    g.add_argument("--backend", default="local", choices=["local", "ray"],
                   help="local: one model in this process; ray: an actor pool on Ray (RAY_ADDRESS or a local Ray)")
    # --engine was this option's name until "engine" came to mean only the LLM loop; kept for one release.
    g.add_argument("--engine", dest="backend", choices=["local", "ray"], default=argparse.SUPPRESS,
                   action=DeprecatedAlias, preferred="--backend", help="deprecated spelling of --backend")
    g.add_argument("--batch-size", type=positive_int, default=1,
                   help="questions per left-padded batch, locally or per Ray actor (GPU throughput; same answers "
                        "as 1)")
    g.add_argument("--actors", type=positive_int, default=1, help="Ray: model replicas (one per actor; default 1)")
    g.add_argument("--cpus-per-actor", type=positive_number, default=None,
                   help="Ray: CPUs each actor holds (default: 1, or an even share of what decoding leaves, so "
                        "--actors 2 fits a 2-CPU machine)")
    g.add_argument("--gpus-per-actor", type=non_negative_number, default=None,
                   help="Ray: GPUs per actor, fractions allowed (0.5: two small models share a GPU; "
                        "default: 1 when the cluster has GPUs, else 0)")
    g.add_argument("--num-cpus", type=positive_int, default=None,
                   help="Ray: CPUs of the local Ray started when no cluster address is given (default: all cores)")
    g.add_argument("--timeout", type=positive_seconds, default=600.0,
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


def _checked(text: str, read, ok, expected: str):
    """`read(text)` when it parses and passes `ok`; else the one-line argparse error naming what was expected."""
    try:
        value = read(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def _finite(text: str) -> float | None:
    x = float(text)
    return x if math.isfinite(x) else None  # nan and inf (1e999 too) are never a meaningful setting


def non_negative_int(text: str) -> int:
    return _checked(text, int, lambda n: n >= 0, "a whole number >= 0")


def port_number(text: str) -> int:
    return _checked(text, int, lambda n: 0 <= n <= 65535, "a port number in 0-65535")


def positive_seconds(text: str) -> float:
    """A time limit: a finite number > 0 (0 would send nothing; nan and inf break the timers)."""
    return _checked(text, _finite, lambda x: x > 0, "a number of seconds > 0")


def positive_number(text: str) -> float:
    return _checked(text, _finite, lambda x: x > 0, "a number > 0")


def non_negative_number(text: str) -> float:
    return _checked(text, _finite, lambda x: x >= 0, "a number >= 0")


def _flag(name: str, value) -> str:
    """How the user wrote an option: `--k 3`, `--keep-positions`, `--no-keep-positions`."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag.removeprefix("--")
    return f"{flag} {value}"


def prune_from_args(args: argparse.Namespace, default_k: int | None = None) -> PruneConfig:
    """The checked pruning configuration of the command line (an InputError names a bad or ignored option).
    `default_k`: FastV's K when --k is not given (the model's, from its videoqa.json)."""
    method = REGISTRY.get(args.prune)
    given = {name: getattr(args, name) for name in REGISTRY.options() if getattr(args, name, None) is not None}
    if default_k is not None and "k" in method.option_names:
        given.setdefault("k", default_k)
    ignored = [name for name in given if name not in method.option_names]
    if args.r is not None and not method.uses_r:
        ignored.insert(0, "r")
    if ignored and not getattr(args, "prune_initial_only", False):
        shown = " ".join(_flag(name, args.r if name == "r" else given[name]) for name in ignored)
        users = [m.name for m in REGISTRY
                 if all(name in m.option_names or (name == "r" and m.uses_r) for name in ignored)]
        hint = f"it applies to --prune {'/'.join(users)}" if users else "each applies to another method"
        raise InputError(f"{shown}: not used by --prune {args.prune} ({hint}); drop it or change the method")
    r = parse_r(args.r) if args.r is not None else AUTO
    return PruneConfig(method=args.prune, r=r, **given).validate(keep_others=bool(ignored))


@dataclass(frozen=True)
class ModelChoice:
    """The model the options name: its card (videoqa.json, read once) and the policy built from it (once)."""

    card: ModelCard
    policy: ModelPolicy
    conversation: str  # the prompt template it was trained on (its card's, or its family's own)


def model_choice(args: argparse.Namespace) -> ModelChoice:
    try:
        path = resolve_model(args.model)
    except ModelLoadError:  # the cheaper checks (the results file, the clips) speak first; loading says this
        return ModelChoice(ModelCard(), model_policy(ModelCard()), ModelCard().conversation)
    card = card_of(path)
    return ModelChoice(card, model_policy(card), conversation_of(card, family_at(path)))


def model_spec_from_args(args: argparse.Namespace, choice: ModelChoice | None = None,
                         prune: PruneConfig | None = None) -> dict:
    """What `VideoQA.from_spec` needs, as plain data (it is shipped to Ray actors and recorded). What is not
    given comes from the model's videoqa.json (its conversation, K), so records name the settings that ran.
    `choice`: the model's card and policy, `prune`: the options' `prune_from_args`, when the caller has them."""
    choice = choice or model_choice(args)
    policy = choice.policy
    prune = prune or prune_from_args(args, policy.k)
    cache_bytes = getattr(args, "prefix_cache_bytes", None)
    return {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "attn_implementation": args.attn,
        "prune": prune.to_dict(),
        "frames": args.frames,
        "sampler": args.sampler or policy.sampler,
        "max_new_tokens": args.max_new_tokens,
        "prompt": args.prompt or choice.conversation,
        "decode": "compiled" if args.compile else "eager",
        # only when given: the records of runs that left it to the default stay as they were (resuming compares them)
        **({} if cache_bytes is None else {"prefix_cache_bytes": cache_bytes}),
    }


def load_qa(args: argparse.Namespace, spec: dict | None = None, choice: ModelChoice | None = None,
            prune: PruneConfig | None = None) -> VideoQA:
    """The model the options describe (loaded once; their pruning is its default). `spec`, `choice`, `prune`: the
    options' `model_spec_from_args`, `model_choice` and `prune_from_args`, when the caller already has them (the
    card is read once, the policy built once, the pruning options checked once)."""
    from ..pipeline import VideoQA

    choice = choice or model_choice(args)
    if spec is None:
        prune = prune or prune_from_args(args, choice.policy.k)
        spec = model_spec_from_args(args, choice, prune)
    return VideoQA.from_spec(spec, prune=prune, card=choice.card, model_policy=choice.policy)


def backend_from_args(args: argparse.Namespace, spec: dict | None = None) -> Produce:
    """The batch back end the options ask for; nothing is loaded until it is given work. `spec`: the options'
    `model_spec_from_args`, when the caller already has it (checked once)."""
    spec = spec or model_spec_from_args(args)
    if args.backend == "ray":
        from ..batch.ray_backend import RayOptions, ray_backend

        opts = RayOptions(actors=args.actors, cpus_per_actor=args.cpus_per_actor, gpus_per_actor=args.gpus_per_actor,
                          timeout_s=args.timeout, address=args.ray_address, num_cpus=args.num_cpus,
                          batch_size=args.batch_size)
        return ray_backend(spec, opts)
    from ..batch.local import local_backend

    return local_backend(spec, args.batch_size)
