"""Build configuration beyond pyproject.toml: the one C extension, ``ingest.formats._fields``.

It is optional: where no C compiler is at hand the install still succeeds, and the text-log reader
uses its numpy/Arrow path, which gives the same result more slowly.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ingest.formats._fields",
            ["ingest/formats/_fields.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
