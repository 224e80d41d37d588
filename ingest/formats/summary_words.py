"""Words of an epoch summary printed in another language, for the evaluation lines of the generic
reader (:mod:`ingest.formats.eval_lines`; issue #31; docs/diagnosis.md, "Import: steps, epochs and runs").

A console may print its epoch summary in Chinese (``Epoch 17 完成 | 训练损失: 4.5880 | 验证损失: 5.9688
| 时间: 388.0s``: done, training loss, validation loss, time). The pair parser reads keys in Latin
letters only, so those words are put into their English names first (full-width punctuation into its
ASCII form); the line's numbers and units are left as printed.
"""

from __future__ import annotations

import re
from typing import Final

_WORDS: Final = {
    "验证集损失": "val_loss",
    "验证损失": "val_loss",
    "校验损失": "val_loss",
    "测试集损失": "test_loss",
    "测试损失": "test_loss",
    "训练集损失": "train_loss",
    "训练损失": "train_loss",
    "平均损失": "mean_loss",
    "损失": "loss",
    "学习率": "lr",
    "时间": "time",
    "耗时": "time",
    "完成": "done",
    "轮次": "epoch",
    "：": ":",
    "，": ",",
    "｜": "|",
}
_FOREIGN: Final = re.compile("|".join(sorted(map(re.escape, _WORDS), key=len, reverse=True)))


def in_english(line: str) -> str | None:
    """``line`` with the summary words above in English; None when it holds none of them."""
    if _FOREIGN.search(line) is None:
        return None
    return _FOREIGN.sub(lambda m: f" {_WORDS[m[0]]} " if m[0][0] not in "：，｜" else _WORDS[m[0]], line)
