"""The training side of StabScope: what runs inside a user's training loop and writes its shards, and
the demo trainer that trains that way.

- :mod:`ingest.training.monitor`: :class:`~ingest.training.monitor.StabilityMonitor` (one per rank:
  ``log`` every optimizer step, ``sync`` before a checkpoint, ``close``) and ``MonitorRecord``.
- :mod:`ingest.training.ddp_hook`: ``GradNormHook``, the DDP communication hook that measures the
  gradient norm before (this rank's batch) and after (the global batch) each bucket's all-reduce.
- :mod:`ingest.training.loss_sync`: the cross-rank loss mean, all-reduced in batches of steps; the
  protocol that keeps every rank cutting its batches at the same steps.
- :mod:`ingest.training.gpu_sampler`: peak GPU memory every step, NVML figures less often.
- :mod:`ingest.training.run_metadata`: the scheduler's and the clipper's settings as run metadata,
  and the scheduler's transitions as events.
- :mod:`ingest.training.hf_callback` / :mod:`ingest.training.lightning_callback`: the same shards from a
  Hugging Face ``Trainer`` or a Lightning ``Trainer`` through a callback (the ``[hf]`` / ``[lightning]``
  extras; the only modules that import those frameworks).
- :mod:`ingest.training.toy_model`: the one toy model (a small GPT, dense or with a top-1 MoE block)
  and its next-token loss; :mod:`ingest.training.train_loop`: the one training loop (optimizer,
  scheduler and clipper in a ``Trainer``; ``train_steps``, a batch taken whole or in halves). The
  demo trainer and the experiment both train through these two.
- :mod:`ingest.training.demo_trainer`: ``stabscope demo-train`` (the toy model on gloo CPU
  processes, with provocations and checkpoint/resume).
- ``experiment*`` and :mod:`ingest.training.lead_time`: ``stabscope experiment`` (the arms and
  mechanisms, the byte corpus, the results, the report).
- :mod:`ingest.training.spawn`: running a function on several local processes (the demo, the
  benchmark, the distributed tests).

The torch classes with no I/O (here, not in ``stab_core``, which holds no torch), at module level:
``ingest.training.torch_clipping`` (``clip_grad_norm``, ``ZClip``, ``global_grad_norm``) and
``ingest.training.torch_schedulers`` (``WarmupCosineRestartScheduler`` and the baselines). The
measurement of the monitor's cost is ``bench.training`` (goal 5).

The monitor's modules import torch at the top (a training process has it loaded); the demo
trainer, the toy model, the loop, the experiment and ``spawn`` import it inside their functions,
because the ``stabscope`` CLI imports the demo trainer's ``add_cli`` for every command. This file
imports nothing, so importing one module of the package does not load the others.
"""
