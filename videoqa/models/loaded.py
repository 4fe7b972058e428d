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
        """The prompt template the model was trained on: its card's, or, for a folder without a card, the
        card's default where the family has it (Video-LLaVA's "official"), else the family's own first."""
        card, templates = self.card, self.family.templates
        return card.conversation if card.path or card.conversation in templates else next(iter(templates))
