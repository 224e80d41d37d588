"""Build configuration beyond pyproject.toml: the one C extension, ``ingest.formats._fields``, and the
Streamlit config the installed app serves with.

The extension is optional: where no C compiler is at hand the install still succeeds, and the
text-log reader uses its numpy/Arrow path, which gives the same result more slowly.

The config's one copy is the source tree's ``.streamlit/config.toml`` (where ``streamlit run app.py``
reads it); a build copies it into the ``pages`` package as ``pages/_streamlit/config.toml``, where
``stabscope serve`` of an installed wheel finds it (``pages.server.PACKAGED_CONFIG``).
"""

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

STREAMLIT_CONFIG = Path(".streamlit") / "config.toml"
"""The source tree's Streamlit config, relative to the project root (a build's working directory)."""
PACKAGED_CONFIG = Path("pages") / "_streamlit" / "config.toml"
"""Where the built package holds its copy, relative to the build's library folder."""


class BuildPyWithStreamlitConfig(build_py):
    """``build_py`` that also copies the Streamlit config into the built ``pages`` package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install serves from the source tree, which has the file itself
        if not STREAMLIT_CONFIG.is_file():
            raise FileNotFoundError(
                f"cannot build StabScope: {STREAMLIT_CONFIG.resolve()} is missing. Build from the project's "
                "source tree (or an sdist made from it), which holds the app's Streamlit settings there."
            )
        target = Path(self.build_lib) / PACKAGED_CONFIG
        self.mkpath(str(target.parent))
        self.copy_file(str(STREAMLIT_CONFIG), str(target))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs.append(str(Path(self.build_lib) / PACKAGED_CONFIG))
        return outputs


setup(
    cmdclass={"build_py": BuildPyWithStreamlitConfig},
    ext_modules=[
        Extension(
            "ingest.formats._fields",
            ["ingest/formats/_fields.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ],
)
