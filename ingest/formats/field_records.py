"""Records printed as `` : ``-separated ``Name value`` fields with abbreviated names, rewritten for the
generic reader (:mod:`ingest.formats.generic`) before its pairs are read (issue #31; docs/diagnosis.md, "Import: the
generic reader").

Marian NMT prints ``Ep. 1 : Up. 500 : Sen. 98,087 : Cost 252.47 : Time 302.08s : 8625.72 words/s :
L.r. 9.3750e-06`` and ``[valid] Ep. 1 : Up. 5000 : cross-entropy : 238.694 : new best``. A line with two
`` : `` field separators at least is such a record:

- the abbreviated names are the roles they abbreviate: ``Up.``/``Upd.``/``Iter.``/``It.`` the step,
  ``Ep.`` the epoch, ``L.r.`` the learning rate, ``Cost`` the loss (where the line prints no ``loss``);
- ``Sen.`` (sentences seen within the epoch) is a counter, and ``Time Ns`` the wall time since the
  previous record (many steps, validation included): neither is a metric, both are dropped;
- a line tagged ``[valid]`` (``[validation]``, ``[eval]``, ``[dev]``, ``[test]``) is an evaluation:
  its ``name : value`` fields other than the step and epoch are ``val_`` metrics, its cross-entropy (or
  ``ce-mean``, ``loss``) is ``val_loss`` and its perplexity ``val_ppl``; the early-stopping verdict
  after the value (``new best``, ``stalled 2 times (last best: 238.7)``) is no metric.

An AverageMeter's ``Epoch: [E][ i/N]`` (PyTorch's examples, timm) is the epoch ``E`` and the batch ``i``
of ``N`` (read as ``Epoch E, Iter i/N``: a batch counter restarting each epoch, made global), as is a line that
starts ``[E][ i/N]`` (the ``Epoch:`` before it taken for a launcher's prefix).

A name between bars is a norm (simple-nmt's ``|param|=6.52e+02 |g_param|=2.04e+05``): ``|g_param|``
(``|grad|``, ``|g|``) is the gradient norm, ``|param|`` (``|w|``, ``|weights|``) the parameter norm.
"""

from __future__ import annotations

import re
from typing import Final

from ingest.formats.numbers import NUMBER

_SEP: Final = re.compile(r"[ \t]:[ \t]")
_ABBREVIATED: Final = re.compile(
    r"(?<![A-Za-z0-9_.])(?P<name>Ep\.|Up\.|Upd\.|Iter\.|It\.|L\.r\.|Cost)(?=[ \t]+[-+0-9.])", re.IGNORECASE
)
_ROLE: Final = {"ep.": "epoch", "up.": "step", "upd.": "step", "iter.": "step", "it.": "step", "l.r.": "lr"}
_DROPPED: Final = re.compile(
    r"(?<![A-Za-z0-9_.])(?:Sen\.[ \t]+" + NUMBER + r"|Time[ \t]+" + NUMBER + r"[ \t]?(?:s|sec|ms)\b)", re.IGNORECASE
)
_EVAL_TAG: Final = re.compile(r"\[(?:valid|validation|eval|dev|test)\][ \t]*", re.IGNORECASE)
_VERDICT: Final = re.compile(r"[ \t]:[ \t](?:new best|stalled[ \t]+[0-9]+[ \t]+times?\b.*)$", re.IGNORECASE)
"""An early-stopping verdict after an evaluation's value (``stalled 2 times (last best: 238.7)``): no metric."""
_NAMED_VALUE: Final = re.compile(
    r"(?:^|(?<=[ \t]:[ \t]))(?P<name>[A-Za-z][A-Za-z0-9_\-]*)[ \t]:[ \t](?P<val>" + NUMBER + r")(?![A-Za-z0-9_.])"
)
_EVAL_ROLE: Final = {"cross-entropy": "val_loss", "ce-mean": "val_loss", "loss": "val_loss", "perplexity": "val_ppl"}


def is_field_record(text: str) -> bool:
    """Whether ``text`` is a `` : ``-separated record (two separators at least)."""
    return len(_SEP.findall(text)) >= 2


def expand(text: str) -> str:
    """``text`` with a field record's abbreviated names spelled as their roles, its counters and
    interval times dropped and, on an evaluation line, its metrics named ``val_``; other lines as
    they are."""
    if " : " not in text or not is_field_record(text):
        return text
    has_loss = re.search(r"\bloss\b", text, re.IGNORECASE) is not None
    text = _DROPPED.sub("", text)

    def role(m: re.Match[str]) -> str:
        name = m["name"].lower()
        if name == "cost":
            return m["name"] if has_loss else "loss"
        return _ROLE[name]

    text = _ABBREVIATED.sub(role, text)
    tag = _EVAL_TAG.search(text)
    if tag is None:
        return text
    body = _VERDICT.sub("", text[tag.end() :])

    def evaluated(m: re.Match[str]) -> str:
        name = m["name"]
        if name.lower() in ("epoch", "step"):
            return m[0]
        return f"{_EVAL_ROLE.get(name.lower(), 'val_' + name)}: {m['val']}"

    return text[: tag.start()] + _NAMED_VALUE.sub(evaluated, body)


_NORM: Final = re.compile(r"\|(?P<of>g_?params?|grads?|gradients?|g|params?|weights?|w)\|(?=[ \t]*[:=])", re.IGNORECASE)


def spelled_norms(text: str) -> str:
    """``text`` with a norm written between bars (``|g_param|=2.0e+05``) named as its metric."""
    if "|" not in text:
        return text
    return _NORM.sub(lambda m: "grad_norm" if m["of"].lower().startswith("g") else "param_norm", text)


_METER_EPOCH: Final = re.compile(
    r"(?:\b(?i:epoch)[ \t]*:?[ \t]*|^[ \t]*)\[[ \t]*([0-9]+)[ \t]*\]\[[ \t]*([0-9]+)[ \t]*/[ \t]*([0-9]+)[ \t]*\]"
)


def meter_epoch(text: str) -> str:
    """``text`` with an AverageMeter's ``Epoch: [E][ i/N]`` as ``Epoch E, Iter i/N``."""
    return _METER_EPOCH.sub(r"Epoch \1, Iter \2/\3", text) if "][" in text else text
