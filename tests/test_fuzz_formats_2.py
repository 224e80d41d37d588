"""The fuzz suite's two fuzzers per format (issue #23) on every fourth registered format, from the
second: the tests, their marks and the choice of formats come from ``tests.fuzz_checks``."""

from tests.fuzz_checks import *  # noqa: F403
