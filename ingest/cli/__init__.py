"""``stabscope`` / ``python -m ingest``: the command line over the store.

Every subcommand takes ``--store PATH`` (default: ``$STABSCOPE_STORE`` or the embedded store) and
``--json`` where it prints data. Failures exit non-zero with one paragraph on stderr, no traceback.
The commands that write a run take ``--wait SECONDS``: how long to wait for another process writing the
same run before exiting with status 1 (other failures exit 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ingest.cli.analysis_commands import cmd_diagnose, cmd_spikes
from ingest.cli.output import reported
from ingest.cli.run_commands import (
    cmd_check,
    cmd_compact,
    cmd_delete,
    cmd_export,
    cmd_import,
    cmd_meta,
    cmd_runs,
    cmd_show,
    cmd_watch,
)
from ingest.cli.serve import cmd_demo, cmd_serve

WRITER_WAIT_S = 30.0
"""Default of ``--wait``: seconds a write waits for another process writing the same run
(``ingest.store.run_lock.DEFAULT_WRITER_WAIT_S``; not imported here, so that ``--help`` loads no store)."""

SENSITIVITY_CHOICES = ("low", "default", "high")
"""``spikes --sensitivity``: the names of ``stab_core.severity.SENSITIVITIES``, spelled out so that the
parser is built without importing numpy (tests/test_severity.py checks they agree)."""


WRITING_COMMANDS = frozenset({"import", "compact", "watch", "delete", "demo", "meta"})
"""The commands that write runs, so take ``--wait`` (one writer per run: ``ingest.store.run_lock``)."""


def build_parser(*, training: bool = True) -> argparse.ArgumentParser:
    """The ``stabscope`` parser; with ``training`` also the training side's commands (demo-train,
    experiment), whose parsers load numpy."""
    return _parser_and_commands(training=training)[0]


def _parser_and_commands(*, training: bool) -> tuple[argparse.ArgumentParser, frozenset[str]]:
    """:func:`build_parser` and the names of the commands it knows."""
    parser = argparse.ArgumentParser(prog="stabscope", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=None,
        help="store directory or s3://bucket/prefix (default: $STABSCOPE_STORE or ~/.local/share/stabscope/store)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_, description=help_)
        p.set_defaults(fn=fn)
        if name in WRITING_COMMANDS:
            p.add_argument(
                "--wait",
                type=float,
                default=WRITER_WAIT_S,
                metavar="SECONDS",
                help=f"wait this long for another process writing the same run, then "
                f"{'skip the pass (--once: exit with status 1)' if name == 'watch' else 'exit with status 1'} "
                f"(default {WRITER_WAIT_S:g}; 0: do not wait)",
            )
        return p

    p = add("compact", cmd_compact, "fold archived per-rank shards into a run")
    p.add_argument("shard_dir", help="the shard directory, or an s3://bucket/prefix shard location")
    p.add_argument("--run", required=True)
    p.add_argument(
        "--engine",
        choices=["embedded", "spark"],
        default="embedded",
        help="embedded: this process (default); spark: decode and de-duplicate on Spark (pip install -e '.[spark]')",
    )
    p.add_argument("--master", default=None, metavar="URL", help="Spark master for --engine spark (default local[*])")
    p = add("watch", cmd_watch, "follow a growing log (text, TensorBoard, CSV, JSON lines) or shards into a run")
    p.add_argument(
        "shard_dir",
        metavar="PATH",
        help="a log file, a folder of logs (per-rank logs, a TensorBoard log dir), a shard directory, "
        "or an s3://bucket/prefix shard location",
    )
    p.add_argument("--run", required=True)
    p.add_argument(
        "--format", default=None, metavar="NAME", help="the log's format (default: detected once, as import does)"
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between passes (default 2)")
    p.add_argument("--once", action="store_true", help="fold in what is there and exit")
    p.add_argument("--on-alert", default=None, metavar="CMD", help="shell command run with each alert as JSON on stdin")
    p = add("runs", cmd_runs, "list the runs in the store")
    p.add_argument(
        "--tag", action="append", default=[], metavar="TAG", help="only runs with this tag (repeatable: all)"
    )
    p = add("show", cmd_show, "show one run's catalog entry and events")
    p.add_argument("run")
    p = add("export", cmd_export, "export a run's full-fidelity long table")
    p.add_argument("run")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    p.add_argument("-o", "--output", default=None, help="output file (default RUN.FORMAT; - for standard output)")
    p = add("delete", cmd_delete, "delete a run and its files")
    p.add_argument("run")
    p = add("serve", cmd_serve, "start the dashboard (Streamlit)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every interface, then set a token)",
    )
    token = p.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="viewers must enter the token this file holds (or set STABSCOPE_TOKEN)",
    )
    token.add_argument(
        "--token",
        default=None,
        help="viewers must enter TOKEN (other users see it in `ps` until the server starts: prefer "
        "--token-file or STABSCOPE_TOKEN)",
    )
    token.add_argument(
        "--no-token",
        action="store_true",
        help="no access token (by default serve makes one at each start and prints the address carrying it): "
        "anyone who reaches the port reads and deletes runs",
    )
    p.add_argument("--no-demo", action="store_true", help="do not add the demo runs to an empty store")
    p = add(
        "check",
        cmd_check,
        "check the store's files and catalog like fsck (exit 1 when anything is wrong); --repair fixes what it can",
    )
    p.add_argument("run", nargs="?", default=None, help="check this run only (default: every run)")
    p.add_argument(
        "--repair",
        action="store_true",
        help="delete leftovers of killed writers, merge damaged runs again from their long files, rebuild a "
        "missing or corrupt catalog from the run files",
    )
    p.add_argument(
        "--wait", type=float, default=30.0, metavar="SECONDS", help="how long to wait for a run's writer (default 30)"
    )
    add("demo", cmd_demo, "(re)create the demo runs in the store")
    p = add("import", cmd_import, "import training logs (auto-detected format)")
    p.add_argument("paths", nargs="+")
    p.add_argument("--run", default=None, help="run name (default: derived from the file name)")
    p.add_argument("--format", default=None, help="force a format (see the error listing candidates)")
    p.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set run metadata (repeatable; see `stabscope meta --help`); it wins over what the log states",
    )
    p.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="NAME=ROLE",
        help="store the log's metric NAME as the canonical ROLE (e.g. --map my_loss=loss; repeatable); "
        "remembered with the run and applied again to later imports into it; for a log read by the generic "
        "reader it corrects the proposed mapping, and --map KEY=step chooses its step key",
    )
    into = p.add_mutually_exclusive_group()
    into.add_argument(
        "--append",
        dest="existing",
        action="store_const",
        const="append",
        help="add to the run when it already holds other files (at a step both hold, the new value wins)",
    )
    into.add_argument(
        "--replace", dest="existing", action="store_const", const="replace", help="replace the run when it exists"
    )
    p = add(
        "meta",
        cmd_meta,
        "print or set a run's metadata: gpus, usd_per_gpu_hour, step_time_s, max_norm, precision, "
        "tokens_per_step, num_experts, planned_steps, world_size, tensor/pipeline_parallel_size, save_interval, "
        "sensitivity (low, default, high: the spike thresholds the pages and alerts use), "
        'and the labels tags=a,b and notes="..." (KEY= removes a key; the analyses re-run)',
    )
    p.add_argument("run")
    p.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    p = add("spikes", cmd_spikes, "list a run's detected spikes with cause and actions")
    p.add_argument("run")
    p.add_argument(
        "--all",
        action="store_true",
        help="list the blips too (incidents absorbed within a few steps, hidden by default)",
    )
    p.add_argument(
        "--sensitivity",
        choices=SENSITIVITY_CHOICES,
        default=None,
        help="detection thresholds and longest blip for this listing: low, default or high (default: the one "
        "stored with the run, `stabscope meta RUN sensitivity=high` to store one)",
    )
    p = add("diagnose", cmd_diagnose, "explain the spike at a step")
    p.add_argument("run")
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--metric", default=None, help="only an incident holding this metric (default: any)")
    p.add_argument(
        "--force", action="store_true", help="walk the tree for the step even when no detected incident covers it"
    )
    if training:
        _add_training_commands(add)
    return parser, frozenset(sub.choices or ())


def _add_training_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``demo-train`` and ``experiment`` live with the training side (ingest.training) when present."""
    try:
        from ingest.training.demo_trainer import add_cli
        from ingest.training.experiment_cli import add_cli as add_experiment_cli
    except ImportError:
        return
    add_cli(add)
    add_experiment_cli(add)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # a core command (serve above all, which execs the server at once) does not load the training side's
    # parsers and their numpy; any other word, --help included, gets the full parser
    core, names = _parser_and_commands(training=False)
    parser = core if words and words[0] in names else build_parser()
    args = parser.parse_args(words)
    return reported(args.command, lambda: int(args.fn(args)))


if __name__ == "__main__":
    sys.exit(main())
