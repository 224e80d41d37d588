"""``python -m ingest ...`` is the same CLI as ``stabscope ...``."""

import sys

from ingest.cli import main

sys.exit(main())
