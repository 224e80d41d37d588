"""fairseq and metaseq training logs (``fairseq-train`` / ``hydra_train`` / metaseq's ``train.py``).

Both trainers print the same progress-bar records (``fairseq/logging/progress_bar.py``), behind the
logging prefix ``2021-03-01 12:00:00 | INFO | train_inner | `` (hydra: ``[2021-03-01 12:00:00,123]
[train_inner][INFO] - ``; fairseq <= 0.9: ``| `` or nothing):

- ``--log-format json``: ``{"epoch": 1, "update": 0.01, "loss": "9.276", ..., "num_updates": "100",
  "lr": "0.0005", "gnorm": "1.234", ...}``; numbers go through ``"{:g}"`` so most values are strings.
- ``--log-format simple`` (the default off a terminal): ``epoch 001:    100 / 1000 loss=9.276,
  nll_loss=..., num_updates=100, lr=0.0005, gnorm=1.234, ...``.
- End of epoch (``print``): ``epoch 001 | loss 9.1 | ... | num_updates 1000 | ...`` and
  ``epoch 001 | valid on 'valid' subset | loss 8.1 | ... | num_updates 1000``; in JSON the keys carry
  the tag: ``{"epoch": 1, "train_loss": "9.1", ..., "train_num_updates": "1000"}``,
  ``{"epoch": 1, "valid_loss": "8.1", ..., "valid_num_updates": "1000"}``.

The step is ``num_updates`` (optimizer updates), wherever the record prints it. The per-interval
records give the canonical ``loss``, ``grad_norm`` (``gnorm``), ``lr``, ``loss_scale``,
``throughput_tok_s`` (``wps``: target tokens per second, summed over workers) and ``epoch`` (the
fractional ``update``); the end-of-epoch training summary becomes ``epoch_`` + its JSON name
(``epoch_train_loss``, ``epoch_train_wall`` ...), so that an epoch's average never overwrites the
last interval's values at the same step (a false jump at every epoch end), and the validation
record gives ``val_loss`` and ``valid_*``.

Units: fairseq and metaseq log ``loss`` in bits (``loss_sum / sample_size / math.log(2)``); the
canonical ``loss``/``val_loss`` are nats per token, so both are multiplied by ln 2 (recorded in
``meta['loss_unit_note']``). ``nll_loss``, ``ppl`` and the epoch summaries stay as logged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as _pc

from ingest.formats._common import ParsedLog, Progress
from ingest.formats.aliases import sanitise_name
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays

_TS: Final = r"(?:\[?(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[,.][0-9]+)?)\]?)?"
_EPOCH: Final = r"[^\n\r]*?\bepoch[ \t]+[0-9]+"

BITS_TO_NATS: Final = math.log(2.0)
"""fairseq's losses are base-2 (bits per token); the canonical loss is in nats."""
_BITS_METRICS: Final = ("loss", "val_loss")

UPS_KEY: Final = "updates_per_s"  # a speed by its name: never moved to the settings as a constant
"""Where ``ups`` is read before :meth:`FairseqReader.read` turns it into ``step_time_s`` (1/ups)."""
_INTERVAL_KEYS: Final[dict[str, tuple[str, str | None] | None]] = {
    "loss": ("loss", None),
    "gnorm": ("grad_norm", None),
    "lr": ("lr", None),
    "loss_scale": ("loss_scale", None),
    "wps": ("throughput_tok_s", None),
    "ups": (UPS_KEY, None),  # updates per second: stored as its inverse, the step time
    "num_updates": None,  # the step
}
_BOOKKEEPING: Final = re.compile(r"^(?:epoch|update|bsz|wpb|wall|train_wall|gb_free|nsentences|ntokens|count(?:_.*)?)$")
"""fairseq's bookkeeping fields (``fairseq/trainer.py``, ``fairseq_cli/train.py``): the epoch and its
fraction (``update``), the batch's sentences and target tokens (``bsz``, ``wpb``: how a step was set up),
the sentences and tokens an interval or a validation pass counted (``nsentences``, ``ntokens``: the CTC
and wav2vec criteria), the cumulative and per-interval wall clocks (``wall``, ``train_wall``: the step
time is ``1/ups``), the free GPU memory the allocator reports (``gb_free``) and a criterion's item
counts (hubert's ``count_m_0``): no training metric; nothing is stored for them."""


def _interval_key(key: str) -> tuple[str, str | None] | None:
    """A per-interval (``train_inner``) key: canonical roles, bookkeeping dropped, the rest under its own name."""
    if key in _INTERVAL_KEYS:
        return _INTERVAL_KEYS[key]
    if _BOOKKEEPING.match(key):
        return None
    return (sanitise_name(key), None)


def _tagged_key(key: str) -> tuple[str, str | None] | None:
    """A key of an end-of-epoch JSON record (``train_loss``, ``valid_loss``, ``valid/combined_loss``, a
    named subset's ``dev-other_loss``); the tag's bookkeeping fields (``train_wall``, ``dev-other_bsz``) dropped."""
    if key == "epoch" or key.endswith("_num_updates"):
        return None
    if key in ("valid_loss", "valid/combined_loss"):
        return ("val_loss", None)
    if key.startswith("train_"):  # `train_wall` here is the summary's `wall`, not the interval's own
        return None if _BOOKKEEPING.match(key[6:]) else (sanitise_name("epoch_" + key), None)
    tag, _, field = key.partition("_")
    if _BOOKKEEPING.match(field) and re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", tag):
        return None
    return (sanitise_name(key), None)


def _epoch_train_key(key: str) -> tuple[str, str | None] | None:
    """A key of the end-of-epoch training summary in pipes form: named as its JSON twin (``epoch_train_loss``)."""
    if key == "num_updates" or _BOOKKEEPING.match(key):
        return None
    return (sanitise_name("epoch_train_" + key), None)


def _valid_key(key: str) -> tuple[str, str | None] | None:
    """A key of the validation summary in pipes form: ``loss`` -> ``val_loss``, the rest as ``valid_*``."""
    if key == "num_updates" or _BOOKKEEPING.match(key):
        return None
    if key == "loss":
        return ("val_loss", None)
    return (sanitise_name("valid_" + key), None)


_JSON_PAIRS: Final = r'"(?P<key>[^"\n]+)":[ \t]*"?(?P<val>' + NUMBER + r')"?(?=[ \t]*[,}])'
_PIPE_PAIRS: Final = r"[ \t]*(?P<key>[A-Za-z_][A-Za-z0-9_/]*)[ \t]+(?P<val>" + NUMBER + r")[ \t]*(?=\||[ \t\r]*$)"
_NUM_UPDATES_PIPE: Final = r"(?=[^\n]*\|[ \t]*num_updates[ \t]+(?P<step>[0-9]+)[ \t]*(?:\||[ \t\r]*$))"

FAIRSEQ_KINDS: Final = (
    LineKind(
        name="json_interval",
        prefix=r"[ \t]*" + _TS + r'[^\n{]*?\{(?=[^\n]*"num_updates":[ \t]*"?(?P<step>[0-9]+)"?[ \t]*[,}])',
        pairs=_JSON_PAIRS,
        keymap=_interval_key,
        run_level=True,
    ),
    LineKind(
        name="json_summary",
        prefix=r"[ \t]*" + _TS + r'[^\n{]*?\{(?=[^\n]*_num_updates":[ \t]*"?(?P<step>[0-9]+)"?[ \t]*[,}])',
        pairs=_JSON_PAIRS,
        keymap=_tagged_key,
        run_level=True,
    ),
    LineKind(
        name="simple_interval",
        prefix=(
            r"[ \t]*" + _TS + _EPOCH + r":[ \t]+[0-9]+[ \t]*/[ \t]*[0-9]+[ \t]+"
            r"(?=[^\n]*\bnum_updates=(?P<step>[0-9]+)(?:,|[ \t\r]*$))"
        ),
        pairs=r"(?P<key>[A-Za-z_][A-Za-z0-9_/]*)=(?P<val>" + NUMBER + r")(?=,|[ \t\r]*$)",
        keymap=_interval_key,
        run_level=True,
    ),
    LineKind(
        name="epoch_valid",
        prefix=r"[ \t]*" + _TS + _EPOCH + r"[ \t]*\|[ \t]*valid on '[^'\n]*' subset[ \t]*\|" + _NUM_UPDATES_PIPE,
        pairs=_PIPE_PAIRS,
        keymap=_valid_key,
        run_level=True,
    ),
    LineKind(
        name="epoch_train",
        prefix=r"[ \t]*" + _TS + _EPOCH + r"[ \t]*\|(?![ \t]*valid on )" + _NUM_UPDATES_PIPE,
        pairs=_PIPE_PAIRS,
        keymap=_epoch_train_key,
        run_level=True,
    ),
)

_VALID_SUBSET: Final = re.compile(r"""['"]?valid_subset['"]?\s*[:=]\s*['"]([^'"\n]+)['"]""")
_MARKERS: Final = re.compile(r"\|\s*(?:train_inner|fairseq\.trainer|fairseq_cli\.train|metaseq)|\]\[train_inner\]")
_META: Final = (
    # the config dump (an omegaconf dict or an argparse Namespace): 0 means "no limit" / "clipping off"
    ("total_steps", re.compile(r"""['"]?max_update['"]?\s*[:=]\s*([0-9]+)""")),
    ("max_norm", re.compile(r"""['"]?clip_norm['"]?\s*[:=]\s*(""" + NUMBER + ")")),
    ("world_size", re.compile(r"training on ([0-9]+) devices")),
)


class FairseqReader(PlannedStepsTextLogReader):
    name = "fairseq"
    description = 'fairseq / metaseq: \'train_inner | {"epoch": 1, ..., "loss": "9.276", "num_updates": "100"}\''
    kinds = FAIRSEQ_KINDS

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if _MARKERS.search(text) else 0.85

    def meta_from_head(self, text: str) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        subsets = _VALID_SUBSET.search(text)
        if subsets is not None:  # the first subset is the one fairseq validates the run on (best_loss)
            meta["valid_subset"] = subsets.group(1).split(",")[0].strip()
        for key, pattern in _META:
            m = pattern.search(text)
            if m is None:
                continue
            value = parse_number(m.group(1))
            if value is not None and value > 0:
                meta[key] = int(value) if key != "max_norm" else value
        return meta

    def read(self, paths: Sequence[Path], progress: Progress | None = None) -> ParsedLog:
        parsed = super().read(paths, progress)
        subset = parsed.meta.get("valid_subset")
        for run in (parsed, *parsed.segments):
            table = run.table
            if isinstance(subset, str) and not pc.any(pc.equal(table["metric"], "val_loss")).as_py():
                table = _renamed(table, sanitise_name(subset + "_loss"), "val_loss")
            run.table = bits_to_nats(ups_to_step_time(table), _BITS_METRICS)
            run.meta.setdefault(
                "loss_unit_note",
                "fairseq logs loss in bits (log base 2); loss and val_loss are stored in nats (x ln 2), "
                "nll_loss, ppl and the epoch_train_* averages as logged",
            )
        return parsed


def bits_to_nats(table: pa.Table, metrics: Sequence[str]) -> pa.Table:
    """``table`` with the values of ``metrics`` multiplied by ln 2 (bits -> nats); the rest untouched."""
    names = pc.cast(table["metric"], pa.string())
    chosen = pc.is_in(names, value_set=pa.array(list(metrics), pa.string()))
    if not pc.any(chosen).as_py():
        return table
    values = pc.if_else(chosen, pc.multiply(table["value"], BITS_TO_NATS), table["value"])
    return table.set_column(table.schema.get_field_index("value"), "value", values)


def ups_to_step_time(table: pa.Table) -> pa.Table:
    """``table`` with fairseq's updates per second (:data:`UPS_KEY`) as ``step_time_s`` = 1/ups (NaN where
    the rounded rate is 0)."""
    names = pc.cast(table["metric"], pa.string())
    chosen = pc.equal(names, UPS_KEY)
    if not pc.any(chosen).as_py():
        return table
    rate = table["value"]
    inverse = pc.if_else(pc.greater(rate, 0.0), pc.divide(1.0, rate), float("nan"))
    table = table.set_column(table.schema.get_field_index("value"), "value", pc.if_else(chosen, inverse, rate))
    return _renamed(table, UPS_KEY, "step_time_s")


def _renamed(table: pa.Table, old: str, new: str) -> pa.Table:
    """``table`` with metric ``old`` named ``new``."""
    names = pc.cast(table["metric"], pa.string())
    chosen = pc.equal(names, old)
    if not pc.any(chosen).as_py():
        return table
    renamed = pc.if_else(chosen, pa.scalar(new, pa.string()), names).cast(table.schema.field("metric").type)
    return table.set_column(table.schema.get_field_index("metric"), "metric", renamed)
