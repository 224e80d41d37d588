"""A loss printed under its split's name alone (docs/diagnosis.md, "Import: the loss"; issue #31).

An epoch console that prints one number per split (``epoch 12/300  train 0.0459  val 0.0568  lr
1.00e-03``) names the quantity by the split only: the loss, the one quantity a trainer reports for
both splits without naming it. The rule: where the step lines name no loss of any kind, a bare
``train`` (``training``) beside a bare ``val`` (``valid``, ``validation``), each once, neither with a
unit (``train 2.2s`` is a time), is the training loss and the validation loss. A line that names its
loss (GluonCV's ``train=0.25 val=0.39 loss=2.39``: ``train``/``val`` are accuracies there) keeps them
as they are, and so does a line with only one of the two splits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ingest.formats.aliases import normalise_key

SPLIT_ROLES: Final = {
    "train": "loss",
    "training": "loss",
    "val": "val_loss",
    "valid": "val_loss",
    "validation": "val_loss",
}
"""A bare split word and the loss it names where the line names no loss."""


def split_named_losses(keys: Mapping[str, str], units: Mapping[str, str | None]) -> dict[str, str]:
    """``{name as stored: role}`` for the bare split words of the module docstring's rule, or ``{}``;
    ``keys``: every value of the step lines, ``{name as stored: key as printed}``; ``units``: each
    name's unit (None: printed bare)."""
    if any("loss" in normalise_key(key) for key in keys.values()):
        return {}
    found: dict[str, list[str]] = {}
    for name, key in keys.items():
        role = SPLIT_ROLES.get(normalise_key(key))
        if role is not None and units.get(name) is None:
            found.setdefault(role, []).append(name)
    if set(found) != {"loss", "val_loss"} or any(len(names) != 1 for names in found.values()):
        return {}
    return {names[0]: role for role, names in found.items()}


def propose_split_losses(
    roles: dict[str, str], extra: dict[str, str], keys: Mapping[str, str], units: Mapping[str, str | None]
) -> None:
    """Add the rule's proposal to a mapping's ``roles`` (role -> name) and ``extra`` (name -> role), in place,
    where it has neither a loss nor a validation loss."""
    if "loss" in roles or "val_loss" in roles:
        return
    for name, role in split_named_losses(keys, units).items():
        roles[role] = name
        extra[name] = role
