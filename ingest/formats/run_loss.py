"""Which series is the run's ``loss`` where a log prints no plain loss: one rule per family, shared by
every reader of that family's files (a console and a CSV of the same trainer must agree).

- Detection (Ultralytics YOLO): the optimizer steps on the sum of the printed loss parts (``box_loss``,
  ``obj_loss``, ``cls_loss``, ``dfl_loss``...; YOLOv5's console prints them bare, ``box obj cls``), so the
  run's loss is their sum. Only the training parts count (``val/box_loss`` is the validator's).
- Actor-critic RL: the critic's TD/value loss is a regression loss with a floor, as a supervised loss is;
  the actor's (``-Q``) has no level to come back to, so it keeps its name and is never the loss.
- Model-based RL (Dreamer): the world model is the network trained on the data, by a supervised objective with a
  floor (reconstruction, reward and continuation terms); the actor and critic learn inside it. Where a world model's
  loss (``world_model_loss``, ``model_loss``, ``wm_loss``) sits beside an actor's or critic's loss, it is the run's
  loss, and the world model's gradient norm (``world_model_grad_norm``) the run's ``grad_norm`` (round 24 f30b).
- GAN: the generator's loss is the run's loss where a discriminator loss beside it says the log is a
  GAN's; the discriminator's keeps its name.
- Loss terms (a physics-informed or multi-task model, docs/diagnosis.md, "Import: the loss"): a column that aggregates
  the loss (``mean_loss``, ``total_loss``, ``loss_sum``, a bare ``total``) beside two or more ``*_loss``
  term columns is the run's loss: the optimizer steps on it, the terms are its parts. A VAE's objective
  (``loss_vae``, ``elbo_loss``) beside its terms (``loss_recon``, ``loss_kl``) is one too (docs/diagnosis.md, "Import:
  the loss").
- A lone training loss (docs/diagnosis.md, "Import: the loss"): the one column named as the training split's loss
  (``train/nll_loss``), with no other training loss beside it, is the run's loss.
- A loss with its bucket statistics (docs/diagnosis.md, "Import: the loss"): the one training column named a loss
  (``mse_loss_mean``) whose per-bucket copies (``mse_loss_q0_mean`` .. ``_q3_``: OpenAI's
  guided-diffusion logger splits every term by diffusion-timestep quartile) sit beside it, where every
  other loss-named column is such a copy, is the run's loss: the logger writes the buckets for the
  objective it steps on, and the buckets are parts of it, not other losses.

- One loss among the record's fields (round 26 r26b, docs/diagnosis.md, "Import: the loss"): where no field is the
  loss and no rule above names one, the one training field named a loss that changes over the records is the run's
  loss (an EEG JEPA trainer's ``loss_tgt_mean``). A loss that holds one value on every record is a term switched
  off (``vicreg_loss: 0.0``), and one named as rescaled (``loss_scaled``, ``*_weighted``: divided or weighted for
  the backward pass) is a copy of a loss beside it in the optimizer's units: neither is a second candidate. With
  two candidates or more left, none is chosen (each keeps its name).

Each stand-in is also kept under its own name; none applies where a column already is the loss.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

import numpy as np
import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import to_float
from ingest.formats.aliases import KeyMap, canonical_name

DETECTION_LOSS_PARTS: Final = frozenset({"box", "obj", "cls", "seg", "dfl", "kpt", "kobj", "pose", "angle"})
"""The parts of a detector's loss (YOLOv5 ``box obj cls``, YOLOv8+ ``box cls dfl``, ``seg``/``pose``/``kobj``)."""
CRITIC_LOSSES: Final = frozenset({"loss_critic", "critic_loss", "value_loss", "loss_value", "vf_loss", "qf_loss"})
"""An actor-critic's value regression loss (the last path segment of its name, lower case)."""
WORLD_MODEL_LOSSES: Final = frozenset({"world_model_loss", "model_loss", "wm_loss", "loss_world_model", "loss_model"})
"""A model-based agent's world-model loss (the last path segment of its name, lower case)."""
ACTOR_LOSSES: Final = frozenset({"actor_loss", "loss_actor", "policy_loss", "pi_loss"})
GENERATOR_LOSSES: Final = frozenset({"loss_gen", "gen_loss", "loss_g", "g_loss", "generator_loss", "loss_generator"})
AGGREGATE_WORDS: Final = frozenset({"mean", "avg", "average", "total", "sum", "combined", "overall"})
"""Words that name a loss column as the aggregate of the loss terms beside it (``mean_loss``, ``loss_total``)."""
OBJECTIVE_WORDS: Final = frozenset({"vae", "wae", "cvae", "elbo", "nelbo"})
"""Words that name a loss column as the model's whole objective beside its terms (docs/diagnosis.md, "Import: the loss":
a VAE's ``loss_vae`` beside ``loss_recon``, ``loss_kl``, ``loss_mmd``: the KL term may rise by design while the
objective falls; the objective is what the optimizer steps on)."""
DISCRIMINATOR_LOSSES: Final = frozenset(
    {"loss_dis", "dis_loss", "loss_disc", "disc_loss", "loss_d", "d_loss", "discriminator_loss", "loss_discriminator"}
)


def _leaf(name: str) -> str:
    """``train/loss_critic`` -> ``loss_critic``; ``gen/loss`` -> ``gen_loss`` (Chainer's reporter); a
    CSV header's words (``Generator Loss``) joined as a key's are (``generator_loss``)."""
    parts = re.sub(r"[ \t]+", "_", name.strip().lower()).split("/")
    if len(parts) >= 2 and parts[-1] == "loss" and parts[-2] in {"gen", "dis", "g", "d"}:
        return parts[-2] + "_loss"  # StyleGAN's stats name them ``Loss/G/loss``, ``Loss/D/loss``
    return parts[-1]


def has_loss(names: Iterable[str]) -> bool:
    """Whether a column of ``names`` already is the run's loss (by the alias table)."""
    return any(canonical_name(n)[0] == "loss" for n in names)


def detection_loss_part(name: str) -> bool:
    """Whether ``name`` is a training part of a detector's loss: ``box_loss``, ``train/box_loss``, bare ``box``."""
    head, _, leaf = name.strip().lower().rpartition("/")
    if head not in ("", "train"):
        return False
    return (leaf[: -len("_loss")] if leaf.endswith("_loss") else leaf) in DETECTION_LOSS_PARTS


def summed_loss_parts(names: Iterable[str]) -> list[str]:
    """The columns of ``names`` whose sum is the run's loss: a detector's training loss parts, where no
    column is the loss (or a ``total``). Every detector's loss has a box part, so the parts must hold
    ``box`` and one more (a table with a lone ``cls`` column is no detector's); empty otherwise, or where
    another training ``*_loss`` sits beside the parts (a sum that leaves a part out would not be the loss)."""
    names = list(names)
    if has_loss(names) or any(n.strip().lower() == "total" for n in names):
        return []
    parts = [n for n in names if detection_loss_part(n)]
    others = [
        n
        for n in names
        if n not in parts and n.lower().rpartition("/")[0] in ("", "train") and n.lower().endswith("_loss")
    ]
    boxed = any(n.strip().lower().rpartition("/")[2] in ("box", "box_loss") for n in parts)
    return [] if others or not boxed or len(parts) < 2 else parts


def stand_in_loss(names: Iterable[str]) -> str | None:
    """The column of ``names`` that is the run's loss where none is printed: an actor-critic's critic
    loss, else a GAN's generator loss (with a discriminator loss beside it); None otherwise."""
    names = list(names)
    if has_loss(names):
        return None
    if (world_model := world_model_loss(names)) is not None:
        return world_model
    critic = next((n for n in names if _leaf(n) in CRITIC_LOSSES), None)
    if critic is not None:
        return critic
    if (generator := gan_generator_loss(names)) is not None:
        return generator
    return aggregate_loss(names) or lone_training_loss(names) or bucketed_loss(names)


RESCALED_WORDS: Final = frozenset({"scaled", "weighted"})
"""Words that name a loss field as a rescaled copy of a loss beside it (:func:`sole_loss`)."""
_NOT_A_LOSS_WORDS: Final = frozenset({"scale", "scaler"})
"""Words that make a ``loss`` field the fp16 scaler's factor (``loss_scale``), not a loss."""


def sole_loss(table: pa.Table, names: Iterable[str]) -> str | None:
    """The one training field of ``table`` (its columns ``names``) named a loss that changes over the records,
    switched-off terms and rescaled copies left out (the module docstring's last rule); None where a field already
    is the loss, or where none or several are left. A policy's, critic's or GAN side's loss is no candidate (their
    rules above)."""
    names = list(names)
    if has_loss(names):
        return None
    others = ACTOR_LOSSES | CRITIC_LOSSES | GENERATOR_LOSSES | DISCRIMINATOR_LOSSES | WORLD_MODEL_LOSSES
    named = [
        n
        for n in names
        if _split(n) == "train"
        and "loss" in _words(_leaf(n))
        and not _words(_leaf(n)) & _NOT_A_LOSS_WORDS
        and _objective(n) not in others
    ]
    varying = []
    for name in named:
        values, present = to_float(table[name])
        finite = values[present & np.isfinite(values)]
        if finite.size > 1 and bool(np.any(finite != finite[0])):
            varying.append(name)
    own_unit = [n for n in varying if not _words(_leaf(n)) & RESCALED_WORDS]
    left = own_unit or varying
    return left[0] if len(left) == 1 else None


def world_model_loss(names: Iterable[str]) -> str | None:
    """The world model's loss of ``names`` where an actor's or critic's loss sits beside it (a Dreamer agent's
    record); None otherwise."""
    names = list(names)
    if not any(_leaf(n) in ACTOR_LOSSES | CRITIC_LOSSES for n in names):
        return None
    return next((n for n in names if _leaf(n) in WORLD_MODEL_LOSSES), None)


def model_grad_norm(loss: str, names: Iterable[str]) -> str | None:
    """The gradient norm of the network whose loss ``loss`` is the run's (``world_model_loss`` ->
    ``world_model_grad_norm``), for a world model's loss only; None where the record has none."""
    if _leaf(loss) not in WORLD_MODEL_LOSSES:
        return None
    own = loss[: -len("_loss")] + "_grad_norm" if loss.endswith("_loss") else None
    return own if own in set(names) else None


def gan_generator_loss(names: Iterable[str]) -> str | None:
    """The generator's loss of ``names`` where a discriminator's loss sits beside it and no name is the
    loss (a GAN's printed ``G_loss``, ``D_loss``): the run's loss, by the GAN rule above; None otherwise."""
    names = list(names)
    if has_loss(names) or not any(_objective(n) in DISCRIMINATOR_LOSSES for n in names):
        return None
    return next((n for n in names if _objective(n) in GENERATOR_LOSSES), None)


def _objective(name: str) -> str:
    """The leaf of ``name`` less a training-split prefix: Lightning's ``self.log("train_gen_loss")``
    names the generator's loss of the training split, as ``gen_loss`` does (round 22: f28a)."""
    leaf = _leaf(name)
    for prefix in ("train_", "training_"):
        leaf = leaf.removeprefix(prefix)
    return leaf


_BUCKET = re.compile(r"_q\d+(?=_|$)")
"""A per-bucket statistic's token in a column name (``loss_q1``, ``mse_loss_q3_mean``)."""


def bucketed_loss(names: Iterable[str]) -> str | None:
    """The one training column named a loss beside its per-bucket copies (``mse_loss_mean`` with
    ``mse_loss_q0_mean`` ...), every other loss-named training column being such a copy; None otherwise."""
    names = [n for n in names if _split(n) == "train" and "loss" in _words(_leaf(n))]
    buckets = [n for n in names if _BUCKET.search(_leaf(n))]
    losses = [n for n in names if n not in buckets]
    if len(losses) != 1 or not buckets:
        return None
    own = _leaf(losses[0])
    return losses[0] if all(_BUCKET.sub("", _leaf(b)) == own for b in buckets) else None


def lone_training_loss(names: Iterable[str]) -> str | None:
    """The one column of ``names`` named as the training split's loss (``train/nll_loss``,
    ``train_mse_loss``: a split prefix and a loss word), where no other training column names a loss
    (docs/diagnosis.md, "Import: the loss"); None otherwise. A column without the prefix may be any term, so it never
    counts."""
    names = list(names)
    trained = [n for n in names if re.match(r"(?:train|training)[/_]", n.strip().lower())]
    losses = [n for n in trained if "loss" in _words(_leaf(n).removeprefix("train_").removeprefix("training_"))]
    others = [n for n in names if n not in losses and _split(n) == "train" and "loss" in _words(_leaf(n))]
    return losses[0] if len(losses) == 1 and not others else None


def aggregate_loss(names: Iterable[str]) -> str | None:
    """The column of ``names`` that aggregates two or more ``*_loss`` term columns beside it
    (``mean_loss`` over ``Conductor_loss, Air_loss, ...``; a bare ``total`` over ``box_loss, cls_loss``);
    None without such terms (a lone ``total_loss`` is a proposal to the user, not a rule)."""
    names = list(names)
    aggregates = [n for n in names if _aggregate(_leaf(n))]
    terms = [n for n in names if n not in aggregates and "loss" in _words(_leaf(n)) and _split(n) == "train"]
    train = [n for n in aggregates if _split(n) == "train"]
    return train[0] if len(train) == 1 and len(terms) >= 2 else None


def aggregate_over_term(names: Iterable[str]) -> str | None:
    """The aggregate loss column of ``names`` (:func:`aggregate_loss`: ``total_loss`` over two or more
    ``*_loss`` terms) where the only column the alias table reads as the loss is one of those terms, a
    loss named by its part (``lm_loss``, the language-model term the trainer adds its auxiliary terms to),
    not the loss itself (``loss``, ``train/loss``): the optimizer steps on the aggregate, so it is the run's
    loss and the term keeps its own name (docs/diagnosis.md, "Import: the loss"). None otherwise."""
    names = list(names)
    aliased = [n for n in names if canonical_name(n)[0] == "loss"]
    if not aliased or any(not (_words(_leaf(n)) - {"loss"}) for n in aliased):
        return None  # no loss by alias, or a column that is the loss itself
    aggregate = aggregate_loss(names)
    return aggregate if aggregate is not None and aggregate not in aliased else None


def _words(leaf: str) -> set[str]:
    return set(re.sub(r"[-\s]+", "_", leaf).split("_")) - {"", "train", "training"}


def _aggregate(leaf: str) -> bool:
    words = _words(leaf)
    named = bool(words & (AGGREGATE_WORDS | OBJECTIVE_WORDS))
    return words == {"total"} or (len(words) == 2 and "loss" in words and named)


def _split(name: str) -> str:
    """``train`` for a column of the training split (no split prefix, ``train/``, ``train_``), else the split."""
    low = name.strip().lower()
    head = low.rpartition("/")[0]
    for split in ("val", "valid", "validation", "eval", "test", "dev"):
        if head == split or low.startswith((split + "_", split + "/")):
            return split
    return "train"


def note_loss_source(
    builder: LogBuilder, origin: str | Iterable[str], beside: Iterable[str] = (), kind: str | None = None
) -> None:
    """Record in the run's meta where its stand-in ``loss`` came from (``loss_source``: the raw name(s)
    and the kind: ``detection_parts``, ``critic`` or ``generator``), so pages title the loss axis by it
    and no one reads it as a token cross-entropy (``stab_core.loss_origin``). ``beside``: the columns
    read with it (a loss chosen among its bucket copies is the training loss: :func:`bucketed_loss`); ``kind``: the
    kind where the caller knows it (the one loss of a record, :func:`sole_loss`, is a training loss)."""
    if isinstance(origin, str) and kind is not None:
        builder.meta.setdefault("loss_source", {"name": origin, "kind": kind})
    elif isinstance(origin, str):
        leaf = _leaf(origin)
        kind = (
            "world_model"
            if leaf in WORLD_MODEL_LOSSES
            else "critic"
            if leaf in CRITIC_LOSSES
            else "aggregate"
            if _aggregate(leaf)
            else "training"
            if leaf not in GENERATOR_LOSSES and (origin in (lone_training_loss([origin]), bucketed_loss(beside)))
            else "generator"  # a GAN's, or a trainer's optimizer's loss (Coqui's loss_1)
        )
        builder.meta.setdefault("loss_source", {"name": origin, "kind": kind})
    else:
        builder.meta.setdefault("loss_source", {"name": "+".join(origin), "kind": "detection_parts"})


def add_run_loss(
    builder: LogBuilder, table: pa.Table, step_col: str, keymap: KeyMap | None = None, first_seq: int | None = None
) -> None:
    """Store a table's stand-in for the run's ``loss`` (the rules above) at its rows' steps: the sum of
    a detector's loss parts (rows where every part has a value), else the critic's or generator's loss.
    Nothing where a column already is, or is mapped by ``keymap`` to, the loss. ``first_seq`` (what
    :func:`ingest.formats._tabular.add_wide` returned for the table) numbers the derived values as the rows
    they come from, so the import report counts each row once, not its derived loss as more records."""
    names = [c for c in table.column_names if c != step_col]
    if keymap is not None and any((keymap(c) or ("",))[0] == "loss" for c in names):
        return
    parts = summed_loss_parts(names)
    source = None if parts else stand_in_loss(names)
    sole = None if parts or source is not None else sole_loss(table, names)
    source = source or sole
    if not parts and source is None:
        return
    steps, keep = to_float(table[step_col])
    keep &= np.isfinite(steps)
    total = np.zeros(table.num_rows)
    for column in parts or [str(source)]:
        values, present = to_float(table[column])
        total += np.where(present, values, 0.0)
        keep &= present
    if keep.any():
        origin = "+".join(parts) if parts else source
        builder.add(
            "loss", steps[keep].astype(np.int64), total[keep], canonical=True, origin=origin, seq=_rows(first_seq, keep)
        )
        note_loss_source(builder, parts or str(source), names, kind="training" if sole else None)
    norm = None if parts or source is None or "grad_norm" in names else model_grad_norm(source, names)
    if norm is not None:  # the world model's gradient norm is the run's (module docstring)
        values, present = to_float(table[norm])
        rows = present & np.isfinite(steps)
        builder.add(
            "grad_norm",
            steps[rows].astype(np.int64),
            values[rows],
            canonical=True,
            origin=norm,
            seq=_rows(first_seq, rows),
        )


def _rows(first_seq: int | None, mask: np.ndarray) -> np.ndarray | None:
    """The sequence numbers of the table rows ``mask`` selects, or None (new numbers) without ``first_seq``."""
    return None if first_seq is None else first_seq + np.flatnonzero(mask).astype(np.int64)
