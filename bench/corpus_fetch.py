"""Rebuild the held-out corpus folder from the golden files' provenance.

The logs are not in this repository (their licences vary); each golden names the repository,
commit, path and sha256 of its log. Given a folder of git mirrors named ``owner+name`` (a bare
repository or one with ``.git``), this writes ``CORPUS/<golden name>/<file>`` and a
``PROVENANCE.txt`` beside it, and checks the sha256.

    python -m bench.corpus_fetch --mirrors MIRRORS --corpus CORPUS
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "tests" / "corpus" / "golden"


def _git_dir(mirrors: Path, repo: str) -> Path | None:
    root = mirrors / repo.replace("/", "+")
    for candidate in (root / "repo" / ".git", root / "repo", root):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    return None


def rebuild(mirrors: Path, corpus: Path, golden_dir: Path = GOLDEN_DIR) -> tuple[list[str], list[str]]:
    """Write every log whose mirror is present; return (written, missing with the reason)."""
    written: list[str] = []
    missing: list[str] = []
    for golden_path in sorted(golden_dir.glob("*.json")):
        golden = json.loads(golden_path.read_text())
        name, prov = golden["name"], golden["provenance"]
        target_dir = corpus / name
        target = target_dir / prov["file"]
        git_dir = _git_dir(mirrors, prov["repo"])
        if git_dir is None:
            missing.append(f"{name}: no mirror of {prov['repo']}")
            continue
        shown = subprocess.run(
            ["git", f"--git-dir={git_dir}", "show", f"{prov['commit']}:{prov['path']}"],
            capture_output=True,
            check=False,
        )
        if shown.returncode != 0:
            missing.append(f"{name}: {prov['commit'][:10]}:{prov['path']} not in the mirror")
            continue
        digest = hashlib.sha256(shown.stdout).hexdigest()
        if digest != prov["sha256"]:
            missing.append(f"{name}: sha256 {digest[:12]} is not the golden's {prov['sha256'][:12]}")
            continue
        target_dir.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shown.stdout)
        lines = shown.stdout.count(b"\n")
        (target_dir / "PROVENANCE.txt").write_text(
            f"repository: {prov['repo']}\ncommit: {prov['commit']}\npath: {prov['path']}\n"
            f"sha256: {digest}\nbytes: {len(shown.stdout)}\nlines: {lines}\n"
        )
        written.append(name)
    return written, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True, help="folder of owner+name git mirrors")
    parser.add_argument("--corpus", type=Path, required=True, help="folder to write the logs into")
    args = parser.parse_args(argv)
    written, missing = rebuild(args.mirrors, args.corpus)
    print(f"{len(written)} logs written to {args.corpus}")
    for line in missing:
        print(f"missing: {line}", file=sys.stderr)
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
