"""A draft as inspect read it: its description, geometry and tensor headers together, which a
published profile is compared with (`draft.profiles.match_profile`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.geometry import Geometry
from dflash_tools.draft.tensors import TensorSummary


@dataclass(frozen=True)
class InspectedDraft:
    """A draft as inspect read it, which a profile is compared with: its description, its
    geometry (None: no valid block size) and its tensor headers (None: weights not inspected)."""

    description: DraftDescription
    geometry: Geometry | None = None
    tensors: TensorSummary | None = None

    @property
    def fingerprint(self) -> tuple[Any, ...]:
        """What `Profile.fingerprint` compares: the algorithm and three dimensions."""
        d = self.description.decoder
        return (self.description.algorithm.value, d.hidden_size, d.num_hidden_layers, d.vocab_size)

    def sections(self) -> dict[str, Any]:
        """The sections a profile records (`_COMPARED`), named as the profile names them."""
        desc = self.description
        return {
            "dialect": desc.dialect.value,
            "algorithm": desc.algorithm.value,
            "geometry": self.geometry.to_dict() if self.geometry is not None else None,
            "model": desc.model_fields(),
            "tensors": self.tensors.to_dict() if self.tensors is not None else None,
        }
