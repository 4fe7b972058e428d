"""A loaded checkpoint: model, processor, where it runs, its card and its family."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model_card import ModelCard
from .base import Family
from .registry import family_of

if TYPE_CHECKING:
    import torch


@dataclass
class LoadedModel:
    model: torch.nn.Module
    processor: Any
    device: torch.device
    dtype: torch.dtype
    name: str
    # The folder's videoqa.json (its conversation, its policy constants), read by load_model. One built by hand
    # from parts already loaded (tests, GPU checks) keeps the plain template, as before cards existed.
    card: ModelCard = field(default_factory=lambda: ModelCard(conversation="plain"))
    family: Family | None = None  # None: found from the model's config (`family_of`)

    def __post_init__(self):
        if self.family is None:
            self.family = family_of(self.model.config)

    def conversation(self) -> str:
        """The prompt template the model was trained on (`conversation_of` its card and family)."""
        return conversation_of(self.card, self.family)


def conversation_of(card: ModelCard, family: Family | None) -> str:
    """The card's conversation (default Video-LLaVA's "official") where the family has such a template, else the
    family's own first (today's families: their processor's chat template); the card's with no family known."""
    if family is None or card.conversation in family.templates:
        return card.conversation
    return next(iter(family.templates))
