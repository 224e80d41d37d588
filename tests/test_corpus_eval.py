"""The held-out corpus evaluation (bench.corpus_eval) on the real logs: runs only where
``STABSCOPE_CORPUS`` names the folder holding them (they are not in the repository)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.corpus_eval import evaluate, load_goldens, main
from bench.corpus_scores import LogScore, split_totals, totals
from bench.statement_eval import VERDICTS

CORPUS = os.environ.get("STABSCOPE_CORPUS")
pytestmark = pytest.mark.skipif(
    not CORPUS or not Path(CORPUS).is_dir(),
    reason="STABSCOPE_CORPUS does not name a corpus folder (the held-out logs live outside the repository; "
    "see tests/corpus/README.md)",
)

# the figures of docs/diagnosis.md ("Current figures on the corpus") on the code that wrote them: a ratchet,
# never worse. The first 33 logs (batches 1-5): their thresholds were set on them.
MAX_IMPORT_FAULTS = 0
MIN_RECALL = 13 / 13
MAX_SHOWN_ON_HEALTHY = 0
MIN_STATEMENT_PRECISION = 0.99  # 0.994 (354 / 356) after stm10 (round 10); 0.975 (357 / 366) before
# Batches 6-8 together (held out when first scored, tuned on since), at the end of the 2026-12-05 round
HELD_OUT_MAX_IMPORT_FAULTS = 0
HELD_OUT_MIN_RECALL = 17 / 17
HELD_OUT_MAX_SHOWN_ON_HEALTHY = 3  # batch 8's minGPT adder: late one-sample jumps its golden lists as may_find
HELD_OUT_MIN_STATEMENT_PRECISION = 0.98  # 0.992 (585 / 590) after stm10 (round 10); 0.957 (595 / 622) before
HELD_OUT_MAX_QUIET_SPANS_FLAGGED = 0
HELD_OUT_MAX_MUST_NOT_SAY = 0

# Per golden batch (splits.batch_*: a batch's logs do not change when a round re-labels "tuned_on"), measured at
# the end of the 2026-12-05 round (main after det9): import faults, recall, shown on healthy logs, must-not-say
# phrases said, invented incidents (at most), statement precision (at least). Batch 9 was first measured held out
# (docs/diagnosis.md gives those figures), then tuned on: its floors are the tuned figures.
BATCH_FLOORS: dict[str, tuple[int, float, int, int, int, float]] = {
    "batch_old": (0, 13 / 13, 0, 0, 0, 0.99),  # 0.997 (355 / 356) after round 10b
    "batch_6": (0, 6 / 6, 0, 0, 0, 0.99),  # 0.993 (284 / 286)
    # 0.908 (99 / 109) since imp10: one true note that no golden fact judges ("the loss takes negative values":
    # the GRPO terminal's loss is -0.0303 once; its golden states only the first and last losses, both positive)
    # 0.991 (106 / 107) since det10b: the trainers' "0 finite samples" notes now say "all N are non-finite"
    "batch_7": (0, 3 / 3, 0, 0, 0, 0.98),
    # sev12: 0 shown on healthy (the adder's one-log jumps are its routine noise: blips)
    "batch_8": (0, 8 / 8, 0, 0, 0, 0.99),  # 1.000 (169 / 169)
    # det14: 0 broken (a grad norm NaN at its first sample, then frozen, is "not back", not "diverged")
    "batch_9": (0, 7 / 7, 0, 0, 0, 0.99),  # 0.996 (236 / 237); det10 + imp10: 0 faults, 0 shown on healthy
    # batch 10 tuned on since round 10b (thr10 + det10b + imp10b); floors set after the merges
    # sev12: 6 shown on healthy, 0 broken, 0 invented (recurring jumps are blips; lasting levels diverge)
    # det17: 5 shown on healthy, 0.9452 (207 / 219): a one-row jump whose val loss came back with it is a blip
    # act17: 0.9550 (212 / 222): no MoE expert load asked of runs that name no experts
    # merged con17 + det17 + gen17 + act17 (main fb7d706): 0.9624 (205 / 213)
    # det20: 0.9716 (205 / 211): a dozen steps 1-1.5x slow that came back are no throughput loss
    # det22: 4 shown on healthy, 0.9754 (198 / 203): a grad-norm outlier the loss never rose above its scatter for
    "batch_10": (0, 5 / 6, 3, 0, 0, 0.984),  # 0.9339 (212 / 227) after sev12; stm12 and rev12b; t24a 3, 0.979
    # batch 11 tuned on since round 11 (att11 + imp11); floors set after the merges
    # stm12 0.9252 (272 / 294); sev12: no "diverged" said; imp12: 0 faults (ms-swift's step time and tokens/s),
    # 17 / 19 (the abandoned attempt's jump dated at its first step over), 0 invented, 0.9592 (282 / 294)
    # det14: 18 / 19 (an early rise that lasts three logs after a fall), 0.9565 (286 / 299)
    # act22: 0.959 (283 / 295): no "consistent with a bad batch" where a logged value spans more than 20 steps
    "batch_11": (0, 18 / 19, 2, 0, 0, 0.955),
    # batch 12 measured held out at 03:12 UTC on 6a1da2b (44 faults on 27 logs, 0 / 16, precision 0.621), then
    # tuned on (imp13a/b/c, det13): its floors are the tuned figures
    # imp14a: 4 faults on 4 logs (Marian, tqdm-glued, step-less TEST and simple-nmt notes read), 13 / 16,
    # 0.9187 (305 / 332); 1 shown on healthy: the simple-nmt notes' grad norm (|g_param|) is now read and its
    # run-2 jump at epoch 96 (2.32x, a golden may_find blip) is called a spike (a severity call, not an import)
    # imp14b: 13 faults on 6 logs (3 refused), 12 / 16, 0.897 (306 / 341): sweep CSV, epoch axis, YOLO lr
    # merged imp14a + imp14b + det14 (main d4b342a): 0 faults, 15 / 16, 1 shown on healthy, 0.9255 (348 / 376)
    # det15: 0 broken (q_peft_grpo_c3a_lr8e5's golden no longer bans "recovered at": its own may_find recovers)
    # det17: 0.9372 (the mock Megatron early rise's merged grad-norm outliers are blips)
    # act17: 0.9402 (346 / 368): MoE load asked only where experts are named; no init/restart advice to a GAN's loss
    # merged round-14 fixes (main fb7d706): 0.9472 (341 / 360)
    # act24: 0.960 (361 / 376): a stated compute dtype / torch's ComplexHalf warning is the precision; no bad
    # batch read on a GRPO policy's loss
    # round 25 (main 47f0c72): 2 shown on healthy: a simple-nmt run's grad norm 216k -> 509k -> 363k at steps 15-16 is
    # a held short-run surge (r25c; its second sample keeps 0.50 of the height, the rule's edge; the golden: healthy)
    "batch_12": (0, 15 / 16, 2, 0, 0, 0.959),
    # batch 13 measured held out on d4b342a (35 faults on 18 logs, 1 / 12, 4 invented, 6 shown on healthy, 1 broken,
    # 0.598 = 107 / 179), then tuned on. tun15a (CSV tables: step-like counters, the row as the step, total loss
    # proposed, x/lrN groups, run clocks): 30 faults on 12 logs, 4 / 12, 5 invented, 0.646 (175 / 271). det15: 0
    # invented, 1 shown on healthy, 0 broken, 0.745 (102 / 137): a per-step loss's two-log jumps are its noise, a
    # lone NaN grad norm beside a finite loss a skipped step
    # tun15c (text consoles: key-value tables, YOLOv5, epoch blocks, stage consoles): 25 faults on 13 logs,
    # 4 / 12, 2 invented, 6 shown on healthy, 1 broken, 0.684 (154 / 225). Its floor waits for the merge: the
    # JSON log's quiet-span flag (x_mmengine_c3d_scratch_scalars_jsonl, another helper's) fails "quiet == 0"
    # tun15b (JSON/JSONL readers): 35 faults on 18 logs held out at d4b342a -> 17 on 12; precision 0.598 -> 0.643
    # imp16: one loss rule per family (YOLO results.csv parts summed, baselines progress.csv critic, a GAN's
    # generator): 2 faults, 8 -> 10 / 12, 2 invented, 3 shown on healthy, 1 broken (the healthy SN-DCGAN's slow
    # generator drift is now called diverged), 0.775 -> 0.802 (239 / 298)
    # con17: 0 faults (a CSV's clock gives the step time, no elapsed_time_s; an agent's exploration noise is a
    # setting); det17: 1 invented, 2 shown on healthy, 0 broken: merged one-step grad-norm outliers the loss never
    # felt are blips; a GAN generator's drift beside a discriminator that holds is not "diverged"
    # act17: failed-premise actions 16 + 2 -> 6 + 0, 0.802 -> 0.857 (239 / 279): the MoE load asked only where
    # experts are named; an RL critic's or GAN generator's loss is not told to check its initialisation or restart
    # merged round-14 fixes (main fb7d706): 0 faults, 10 / 12, 1 invented, 2 shown on healthy, 0 broken,
    # 0.8897 (242 / 272)
    # det20: 0.9030 (242 / 268): no overfitting said of a val rise while the train loss only wanders
    "batch_13": (0, 10 / 12, 2, 0, 1, 0.933),
    # batch 14 measured held out on fb7d706 (81 faults on 19 logs, 1 crashed, 14 / 26, 1 invented, 6 shown on
    # healthy, 2 broken, 0.847 = 398 / 470), then tuned on: tun18a (PaddleNLP key-value and Coqui Trainer consoles,
    # prose 'is' values, a 't:' clock), tun18b (YOLOv5 results.txt, a DCGAN print in a Markdown export, a
    # Python-logging epoch console, pix2pix loss_log.txt), tun18c (an int64 column past 2**53, bracketed cells,
    # disc_loss, epoch time), tun18d (a resume-cut attempt is not diverged; a slow opening span is no throughput
    # loss). Merged (main 09:55): 40 faults on 5 logs, 21 / 26, 2 invented, 6 shown on healthy, 1 broken,
    # 0.899 (596 / 663)
    # imp19: 26 faults on 4 logs (no key glued to an arrow or a letter: I↔T= is no metric T)
    # det19: 22 / 26, 0 broken, 1 invented, 0.9125 (605 / 663): a GAN whose discriminator won is one divergence
    # det20: 0.9181 (605 / 659): a short slow span must have taken twice the norm's time to be a loss
    # gen20b: 8 faults on 1 log (event-typed JSONL, grouped W&B history columns, a steps_done axis; the relaunch left),
    # 0.9228 (610 / 661)
    # t21d: 4 faults (a metrics CSV whose step goes back to its first is a fresh run: the relaunch read), 0.929
    # rec22: 0.9305 (616 / 662): recovered where the loss is back at its level and stays (an SRGAN generator)
    # act24: 0.935 (619 / 662): no bad batch read on a GAN generator's loss
    # round 22: 0.934 -> 0.933 (618 / 662) with the scorer's onset matching (bench.statement_eval.match), one
    # statement judged against the golden incident that starts where it starts; the product said the same
    "batch_14": (4, 22 / 26, 6, 0, 1, 0.933),
    # batch 15 measured held out on 8a9408a (124 faults on 29 logs, 17 / 26, 27 invented, 8 shown on healthy,
    # 2 broken, 0.7211 = 1140 / 1581), then tuned on: t21a (RL logs), t21c (Markdown/README consoles), t21d
    # (tables), t21e (verl, tqdm postfix bars, an exploded KL term), t21b (GluonCV consoles); merged on 848fc4e:
    # 17 faults on 6 logs, 25 / 26, 3 shown on healthy, 2 broken, 1 invented, 0.908 (511 / 563); fb21f (the
    # precision a Namespace states: no "record the precision" on fp32 GluonCV runs): 0.914 (511 / 559)
    # act22: 0.917 (509 / 555): no "consistent with a bad batch" where a logged value spans more than 20 steps
    # rec22: 0.9153 (508 / 555): recovered where the loss is back at its level and stays (a noprop CIFAR run)
    # f25d (round 19): 0.928 (489 / 527): "the run logs no loss" only where no stored metric names one
    "batch_15": (17, 25 / 26, 1, 2, 1, 0.927),  # t24a: 3 -> 1 shown on healthy, 0.916 -> 0.920 (486 / 528)
    # batch 16 measured held out on 1075fb5 (40 faults on 19 logs, 6 / 9, 25 invented, 6 shown on healthy, 3 broken,
    # 0.555 = 342 / 616), then tuned on (round 16: t22a-d): 10 faults on 7 logs, 9 / 9, 14 invented, 0.723 (360 / 498)
    # det22: 7 shown on healthy, 12 invented, 4 quiet spans flagged, 0.744 (360 / 484): the healthy GPT-2 console's
    # grad-norm outliers the loss never rose above its own scatter for are blips
    # act22: 0.739 (368 / 498): no "consistent with a bad batch" where a logged value spans more than 20 steps
    # round 17 end (fb80796): 9 faults on 6 logs (t23c: a whole-number epoch is an axis), 0.760 (368 / 484)
    # f25d (round 19): a climb back to the level after a dip is no climb (3 invented, 3 shown on healthy, 1 must-not-say
    # and 3 quiet spans gone): 9 invented, 4 shown on healthy, 2 broken, 0.805 (368 / 457), 17 + 1 false actions
    # round 24 (9bf691b): 0.8027 (354 / 441): f30d joins a loss incident that starts before an earlier shown one is
    # back to it; the tqdm-glued 3D-reconstruction console's resume rise (back only at 15334) now holds its spikes at
    # 7913 and 14186 as members (still found), so their 15 true sentences are no longer said on their own: lowered,
    # disclosed in docs/diagnosis.md "Not done"
    "batch_16": (8, 9 / 9, 4, 2, 9, 0.802),
    # batch 17 at the round's start (8e907bb): 97 faults on 21 logs (9 refused), 1 / 20, 0.865; measured held out on
    # 7795ecf (103 faults on 21 logs, 8 refused, 1 / 20, 6 invented, 2 shown on healthy, 1 broken, 0.848 = 380 / 448),
    # then tuned on (round 17: t23a-c, t23e) on fb80796: 144 faults on 15 logs (2 refused; a 13-arm sweep read run by
    # run counts its junk per run), 5 / 20, 11 invented, 7 shown on healthy (3 on a resumed segmentation run's
    # epoch-start running means), 1 broken, 0.826 (526 / 637)
    # run23: a loss printed as the epoch's running mean judged per batch: 8 invented, 3 shown on healthy, no quiet
    # span flagged; act24: a stated compute dtype answers "record the run's precision" (4 false actions gone);
    # imp23: 127 faults on 15 logs (a record over a cycle of lines read, a grid console's settings dict no logs dict);
    # det23: 6 / 20 (a slow climb to the end with the val loss agreeing); t24c: 8 / 20 (an early rise past a
    # one-row blip, a rise giving back the early fall); t24d: a grid console's runs apart, a value back from NaN no
    # divergence; t24b: fairseq's nsentences/ntokens no metric
    # measured on main f5f1ac3 after every merge: 115 faults on 13 logs, 11 / 20, 1 shown on healthy, 0 broken,
    # 3 invented, 0.928 (568 / 612)
    # round 19 (main b1b78fe after f25a-d): 52 faults on 11 logs (f25b: nanochat's data-loader columns, TorchRL's
    # one-step relaunch; f25a: SAR-DDPM's clocks), 0.937 (581 / 620)
    # round 25 (47f0c72): 0.940 (583 / 620): a fp16 run whose loss is printed 0.0 from ~5710 to the end (NaN
    # filtered to zero) is a spike, not a divergence, since r25d's print-resolution rule (a level under the print's
    # resolution is no lasting level at the end); its golden says divergence: the zeros are NaNs in disguise
    # round 26 (0b5491f): 0.939 (568 / 605): r26a stores nanochat's LR multiplier `lrm` as the run's lr, so two
    # `zm_nanochat_*` logs lose 15 true "lr: not in this run" (their goldens list lr as metrics_like only, while
    # facts.logged.lr is true)
    "batch_17": (52, 11 / 20, 1, 0, 3, 0.938),
    # batch 18 held out on 0a38a0d: 48 faults on 17 logs, 10 / 14, 19 shown on healthy, 5 broken, 119 invented (118
    # of them on one PPO CSV whose value loss is noisy throughout), 0.272 (424 / 1560)
    # t24a: a loss noisy throughout shows no excursion inside its own scatter (119 -> 1 invented, 19 -> 9 shown on
    # healthy, 0.272 -> 0.860 = 368 / 428); t24d: 5 -> 3 must-not-say; t24b: 29 faults on 13 logs (a JSONL's last
    # line without a newline, Lightning's evaluation-batch rows, a lone training loss, counters no metric)
    # measured on main f5f1ac3 after every merge: 29 faults on 13 logs, 10 / 14, 7 shown on healthy, 3 broken,
    # 1 invented, 0.895 (357 / 399)
    # round 19 (main b1b78fe after f25a-d): 12 faults on 4 logs (f25a: the GRPO history's 3 launches, guided-diffusion's
    # mse_loss_mean, a prefix ban no longer bans a required metric; f25b: ETH/Ulysses step times and loss), 13 / 14
    # (f25c: the wav2vec2 unfreeze surges; f25a: the diffusion loss's lasting spike), 0.915 (389 / 425)
    # round 25 (47f0c72): 14 / 14, 4 broken, 0.862 (622 / 721): r25c's spread test on a signed objective finds the
    # GRPO history's divergence at 636 and says dozens of spikes of its run 3 (no reward logged to judge them by;
    # its golden groups them as one "may report" that never came back: their "recovered at" are false, one "NaN")
    # round 26 (0b5491f): 0.861 (615 / 714): r26d says "Log the fp16 loss scale" only where the run is known to
    # train in fp16 (108 goldens ban "loss scale" of runs whose precision is unknown); the scorer judged 6 such
    # actions true on `zt_xtts_*` and two `zu_lightning_yolov3_*` logs, which are no longer said
    "batch_18": (12, 14 / 14, 7, 4, 1, 0.861),
    # batch 19 measured at the round's start (81331e1: 61 faults on 17 logs, 12 / 29, 0.878 = 231 / 263) and held out on
    # c909c53 (60 faults on 17 logs, 3 refused, 12 / 29, 1 invented, 2 shown on healthy, 1 broken, 0.882 = 232 / 263);
    # not tuned on then; tuned on in round 20 (main d6c8c24 after f26a-d): 23 faults on 6 logs (f26b: detectron2's
    # appended sessions, the GAN CSV's epoch + batch steps, counters and eta no metrics; f26c: MiniMind, Keras step
    # time, PaddleRec epoch + batch_id), 22 / 29 (f26a: lasting rises of noisy series, NaN episodes, held late
    # climbs), 0 invented, 1 shown on healthy, 0.956 (350 / 366) by `bench.corpus_eval --json`;
    # the ratchet run on 6a1321e measured 0.952 (315 / 331); a whole-corpus pytest run on 68fad54 (round 21) gave every
    # one of the 442 logs exactly the CLI's statements, verdicts, faults and incidents (350 / 366 on batch 19), so that
    # gap did not come from state carried between logs; it is not reproduced. Round 21 (main 1ff8e09 after f27a-d):
    # 23 / 29 (f27c: the Chainer ADDA validation blow-up), 1 false action -> 0.962 (359 / 373; f27c +7 true
    # statements, f27d: no overfitting said where no training loss fell)
    "batch_19": (23, 23 / 29, 1, 1, 0, 0.967),
    # batch 20 measured at the round's start (53d04f6: 96 faults on 16 logs, 2 refused, 11 / 14, 1 invented, 3 shown
    # on healthy, 0.888 = 285 / 321) and held out on d6c8c24 (92 faults on 15 logs, 2 refused, 11 / 14, 1 invented,
    # 3 shown on healthy, 0 broken, 0.885 = 284 / 321); tuned on in round 21 (main 1ff8e09 after f27a-d): 5 faults
    # on 4 logs (f27a: wide records' diagnostics, HF session restarts, unit-named clocks, flat statistics, golden
    # names through the naming rules; f27b: `||` build-nanogpt, PaddleVideo, Paddle hapi, MXNet Module consoles),
    # 13 / 14 (f27c: validation-loss blow-ups), 1 invented, 3 shown on healthy, 0 broken, 0.924 (315 / 341)
    # round 23 (main 3a54686 after f29a-d): 0.928 (320 / 345): f29a reads a Hugging Face/TRL console's progress-bar
    # rate as its step time, and on one GRPO console (yb_trl_grpo_*) tqdm's smoothed rate makes a 24 % slow span of 30
    # steps whose throughput finding and action its golden does not hold (2 false statements; not fixed this round)
    # round 26 (0b5491f): 0.922 (317 / 344): r26d reads the LR rise on every logged param group, so
    # `yc_yolov8_scratch_*`'s validation blow-up the epoch after lr/pg1's warm-up peak gets "Scenario A" and
    # "lengthen the warm-up", which its golden rules out while `ue_yolov8n_scratch_*` (batch 24), the same shape
    # (peak held one epoch, blow-up on the second), calls lr_transition consistent: the goldens disagree
    "batch_20": (5, 13 / 14, 3, 0, 1, 0.921),
    # batch 21 measured at the round's start (68fad54, the code of d6c8c24: 62 faults on 11 logs, 2 refused, 14 / 19,
    # 0 invented, 2 shown on healthy, 15 broken, 0.848 = 352 / 415) and held out on 1ff8e09 (56 faults on 8 logs,
    # 2 refused, 14 / 19, 0 invented, 2 shown on healthy, 15 broken, 0.848 = 352 / 415); not tuned on then; tuned on in
    # round 22 (main 2831b6b after f28a-d): 44 faults on 1 log (the RTD-Net MetricLogger console, read since f28b),
    # 19 / 19 (f28c: validation blow-ups from the level before them, GAN objectives), 0 invented, 14 shown on healthy
    # (12 on the Paddle ICNet console, refused before f28b: its 2-5x one-line outliers, which the sparse-blip rule keeps
    # as spikes; docs/diagnosis.md "Decisions"), 0 broken, 0.917 (522 / 569)
    "batch_21": (44, 19 / 19, 14, 0, 0, 0.917),
    # batch 22 measured at the round's start (fb59602 and the second wave 31d9e76, the code of d684ddc: 94 faults on
    # 12 logs, 16 / 30, 1 invented, 1 shown on healthy, 9 broken, 0.841 = 328 / 390) and held out on 2831b6b (after
    # f28a-d, none made on it): 94 faults on 12 logs, 17 / 30, 1 invented, 1 shown on healthy, 7 broken, 0.842 =
    # 335 / 398; not tuned on: its floors are the held-out figures
    # 335 / 398; tuned on in round 23 (main 3a54686 after f29a-d): 7 faults on 2 logs (f29a: epoch headers, `train X
    # val V`, progress-bar step times, an SFT stage before a GRPO one; f29b: a per-epoch `step` beside `global_step`,
    # counters and bookkeeping no metrics, a once-printed Test line), 24 / 30 (f29c: NaN grad norms beside a printed-0
    # loss, reward collapse, validation blow-ups held to the end), 0 invented, 0 shown on healthy, 2 broken, 0.933
    # (348 / 373)
    "batch_22": (7, 24 / 30, 0, 2, 0, 0.932),
    # batch 23 measured at the round's start (the code of ee4134c: 88 faults on 16 logs, 2 refused, 19 / 28, 34
    # invented, 1 shown on healthy, 3 broken, 0.658 = 1,167 / 1,773) and held out on 3a54686 (after f29a-d, none made
    # on it): 87 faults on 16 logs, 2 refused, 19 / 28, 34 invented, 1 shown on healthy, 3 broken, 0.658 =
    # 1,167 / 1,773; not tuned on: its floors are the held-out figures
    # tuned on in round 24 (main 9bf691b after f30a-e): 15 faults on 3 logs, 18 / 28, 4 invented, 1 shown on healthy,
    # 6 broken, 0.839 (431 / 514). Found 19 -> 18 and broken 3 -> 6 are disclosed: the nanochat validation rise at
    # 40000 and the DeblurGAN slowdown at 2700 had been matched by invented incidents that are gone (f30a, f30d; the
    # torchtitan blow-up at 70 is found, f30c); the Swin console, refused before (f30b), now says "diverged" of
    # three launches that stop at epochs 1-2
    # round 25 (47f0c72): 0 broken, 0.843 (431 / 511): the Swin launches that stop at epochs 1-2 end during their
    # incident, not "diverged" (r25d)
    # round 26 (0b5491f): 7 faults on 2 logs (r26b: the DETR log.txt launches), 0.847 (439 / 518)
    "batch_23": (7, 18 / 28, 1, 0, 4, 0.847),
    # batch 24 measured at the round's start (the code of 991b592: 75 faults on 13 logs, 3 refused, 21 / 41, 6
    # invented, 0 shown on healthy, 3 broken, 0.645 = 222 / 344) and held out on 9bf691b (after f30a-e, none made on
    # it): 67 faults on 13 logs, 3 refused, 21 / 41, 6 invented, 0 shown on healthy, 3 broken, 0.641 = 220 / 343;
    # not tuned on: its floors are the held-out figures
    # tuned on in round 25 (main 47f0c72 after r25a-e): 35 faults on 3 logs, 36 / 41, 4 invented, 0 shown on
    # healthy, 6 broken, 0.833 (522 / 627). Broken 3 -> 6: the T5 console, refused before (r25a), gets precision-fault
    # advice ("loss scale") on its NaN losses
    # round 26 (0b5491f): 3 broken (r26d: no "loss scale" advice on the T5 console of unknown precision), 0.844
    # (526 / 623)
    "batch_24": (35, 36 / 41, 0, 3, 4, 0.844),
    # batch 25 measured at the round's start (the code of 33fc211: 40 faults on 11 logs, 17 / 27, 0 invented, 0 shown
    # on healthy, 0 broken, 0.838 = 244 / 291) and held out on 47f0c72 (after r25a-e, none made on it): the same, to
    # the statement; not tuned on: its floors are the held-out figures
    # tuned on in round 26 (main 0b5491f after r26a-g): 1 fault (DiffWave's per-batch validation rows, which count
    # validation batches, not training steps: its golden lists them as a metric, the imagebind golden as ignored),
    # 21 / 27, 0 invented, 0 shown on healthy, 0 broken, 0.979 (283 / 289)
    "batch_25": (1, 21 / 27, 0, 0, 0, 0.979),
    # batch 26 measured at the round's start (the code of ff830c0: 23 faults on 9 logs, 2 refused, 10 / 21, 3
    # invented, 0 shown on healthy, 1 broken, 0.698 = 201 / 288) and held out on 0b5491f (after r26a-g, none made on
    # it): 23 faults on 9 logs, 10 / 21, 3 invented, 0 shown on healthy, 1 broken, 0.700 = 201 / 287; not tuned on:
    # its floors are the held-out figures
    "batch_26": (23, 10 / 21, 0, 1, 3, 0.700),
}
QUIET_SPANS_FLAGGED: dict[str, int] = {"batch_13": 1, "batch_16": 1, "batch_17": 0, "batch_23": 1}
"""Quiet spans flagged a batch may still show (0 unless named): batch 13's mmengine C3D grad norm rises at 473 to a
level it holds to the end, and that event's highest sample (5861) lies in its golden's quiet span 2000-8600; batch
23: the detectron2 file's spike at 2079 in its quiet span 19-2419 (its four launches are now four runs, f30a; the
spike stays inside the fourth); the resumed Qwen3 console's first-sample artefact is no longer flagged (f30d)."""


@pytest.fixture(scope="module")
def scores() -> list[LogScore]:
    return evaluate(Path(str(CORPUS)), load_goldens())


def test_corpus_scores_hold(scores: list[LogScore]) -> None:
    goldens = load_goldens()
    assert [s.error for s in scores if s.error] == []  # every log present, with the sha256 its golden names
    assert totals(scores)["logs"] == len(goldens)
    # the first 33 logs by their batch: "tuned_on" is re-labelled each round (batch 8 became tuned on)
    t = split_totals(scores)["batch_old"]
    assert sum(t["import_faults"].values()) <= MAX_IMPORT_FAULTS, t["import_faults"]
    assert t["recall"] >= MIN_RECALL
    assert t["shown_on_healthy"] <= MAX_SHOWN_ON_HEALTHY
    assert t["statements_broken"] == 0
    assert t["quiet_spans_flagged"] == 0
    assert t["statements"]["precision"] >= MIN_STATEMENT_PRECISION


def test_held_out_scores_hold(scores: list[LogScore]) -> None:
    # batches 6-8 by their batch, the logs these floors were set on
    t = totals([s for s in scores if s.batch in ("6", "7", "8")])
    assert sum(t["import_faults"].values()) <= HELD_OUT_MAX_IMPORT_FAULTS, t["import_faults"]
    assert t["recall"] >= HELD_OUT_MIN_RECALL
    assert t["shown_on_healthy"] <= HELD_OUT_MAX_SHOWN_ON_HEALTHY
    assert t["statements"]["precision"] >= HELD_OUT_MIN_STATEMENT_PRECISION
    assert t["quiet_spans_flagged"] <= HELD_OUT_MAX_QUIET_SPANS_FLAGGED
    assert t["statements_broken"] <= HELD_OUT_MAX_MUST_NOT_SAY


def test_each_batch_holds(scores: list[LogScore]) -> None:
    """Each batch with a floor holds it; a batch added later has none until it is measured: reported, not held."""
    t = split_totals(scores)
    for which, (faults, recall, healthy, broken, invented, precision) in BATCH_FLOORS.items():
        if which not in t:
            continue
        got = t[which]
        assert sum(got["import_faults"].values()) <= faults, (which, got["import_faults"])
        assert got["recall"] is None or got["recall"] >= recall, (which, got["recall"])
        assert got["shown_on_healthy"] <= healthy, which
        assert got["statements_broken"] <= broken, which
        assert got["invented"] <= invented, which
        assert got["quiet_spans_flagged"] <= QUIET_SPANS_FLAGGED.get(which, 0), which
        assert got["statements"]["precision"] >= precision, (which, got["statements"]["precision"])


def test_every_statement_of_a_log_with_facts_is_judged(scores: list[LogScore]) -> None:
    goldens = load_goldens()
    t = split_totals(scores)
    assert t["all"]["logs_with_facts"] == sum(1 for g in goldens if "facts" in g)
    assert t["held_out"]["logs"] == sum(1 for g in goldens if g.get("tuned_on") is False)
    assert t["held_out"]["logs"] + t["tuned_on"]["logs"] == len(goldens)
    judged = [j for s in scores for j in s.statements]
    assert all(j["verdict"] in VERDICTS and j["fact"] for j in judged)
    for which in ("all", "held_out", "tuned_on"):
        c = t[which]["statements"]
        assert c["all"] == sum(c[v] for v in VERDICTS)
    # the batches split the corpus: every log in one, the statements of all summed over them
    batches = [which for which in t if which.startswith("batch_")]
    assert sum(t[b]["logs"] for b in batches) == len(goldens)
    assert sum(t[b]["statements"]["all"] for b in batches) == t["all"]["statements"]["all"]
    assert t["all"]["required_with_baseline_window"] == sum(
        1 for s in scores for n in s.required_samples_before if n >= 128
    )


def test_cli_prints_the_table(
    scores: list[LogScore], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI prints its tables of the module's scoring: main's call of ``evaluate`` (the corpus folder and
    every golden, all readers) is answered with ``scores``, the same call's result, instead of importing the
    whole corpus a second time (that doubled this module's time)."""
    import bench.corpus_eval as corpus_eval

    asked: list[tuple[Path, list[str], object]] = []

    def scored(corpus: Path, goldens: Sequence[Mapping[str, Any]], reader_set: object = None) -> list[LogScore]:
        asked.append((corpus, [str(g["name"]) for g in goldens], reader_set))
        return scores

    monkeypatch.setattr(corpus_eval, "evaluate", scored)
    assert main(["--corpus", str(CORPUS)]) == 0
    assert asked == [(Path(str(CORPUS)), [s.name for s in scores], None)]
    out = capsys.readouterr().out
    assert "| log | runs stored / in log |" in out and "| StabScope | all |" in out
    assert "| | statements | true | false | unsupported | unjudged | precision (true / all) |" in out
