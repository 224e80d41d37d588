"""The console of PyTorch's DCGAN (``examples/dcgan``, the DCGAN tutorial) and the GAN trainers that copied
its print::

    [3/25][150/782]\tLoss_D: 0.4521\tLoss_G: 2.8713\tD(x): 0.8012\tD(G(z)): 0.1734 / 0.0921

``[E/epochs][I/batches]``: epoch ``E`` (from 0) and batch ``I`` of ``batches``; the step is the global
batch, ``E * batches + I``, and ``epochs * batches`` are planned. ``Loss_G`` (the generator's loss, what
the run trains towards) is stored as ``loss``, ``Loss_D`` as ``disc_loss``; ``D(x)`` is the
discriminator's mean output on real images (``d_x``) and ``D(G(z))`` its mean output on fakes before and
after the discriminator's update (the first stored as ``d_g_z``).

The line may sit behind any prefix (a launcher's, or the ``<br />`` of a notebook exported to Markdown or
HTML). Such an export may quote lines of the output in a ``<details>`` block's ``<summary>`` (its first
and last line, a repeat): lines inside ``<summary>...</summary>`` are no records.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary
from ingest.formats.run_loss import note_loss_source

_LINE: Final = re.compile(
    r"\[[ \t]*(?P<epoch>[0-9]+)[ \t]*/[ \t]*(?P<epochs>[0-9]+)[ \t]*\]"
    r"\[[ \t]*(?P<batch>[0-9]+)[ \t]*/[ \t]*(?P<batches>[0-9]+)[ \t]*\][ \t]*(?P<rest>.*Loss_D.*)$"
)
_PAIR: Final = re.compile(r"(?P<key>Loss_D|Loss_G|D\(x\)|D\(G\(z\)\))[ \t]*:[ \t]*(?P<val>" + NUMBER + ")")
_NAMES: Final = {"Loss_G": "loss", "Loss_D": "disc_loss", "D(x)": "d_x", "D(G(z))": "d_g_z"}
_SUMMARY_OPEN: Final = re.compile(r"<summary\b", re.IGNORECASE)
_SUMMARY_CLOSE: Final = re.compile(r"</summary>", re.IGNORECASE)


class GanConsoleReader(Reader):
    name = "gan_console"
    description = "PyTorch DCGAN console: '[E/N][I/B]  Loss_D: x  Loss_G: x  D(x): x  D(G(z)): x / x'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        rows = sum(1 for line in decode_head(head).splitlines() if _LINE.search(line) and "Loss_G" in line)
        return 0.0 if rows == 0 else 0.95 if rows >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        in_summary = False

        def line(text: str) -> LineResult:
            nonlocal in_summary
            opened = _SUMMARY_OPEN.search(text) is not None
            quoted = in_summary or opened
            in_summary = (in_summary or opened) and _SUMMARY_CLOSE.search(text) is None
            if (m := _LINE.search(text)) is None:
                return [], None
            if quoted:
                return [], "quoted in a <summary>"
            batches = int(m["batches"])
            builder.meta.setdefault("planned_steps", int(m["epochs"]) * batches)
            step = int(m["epoch"]) * batches + int(m["batch"])
            found: list[Row] = []
            for pair in _PAIR.finditer(m["rest"]):
                name = _NAMES[pair["key"]]
                if (value := parse_number(pair["val"])) is not None and all(r[0] != name for r in found):
                    found.append((name, None, step, value))
            return found, None

        read_console(paths, builder, line, "a DCGAN training line")
        note_loss_source(builder, "Loss_G")  # the run's loss is the generator's (ingest.formats.run_loss)
