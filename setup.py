"""Build hook for runfold's one optional C extension, `runfold.core._staging` (the writer's
staging hot path, DESIGN.md §3). Project metadata lives in pyproject.toml; this file only adds
the extension. `optional=True`: without a C compiler or Python headers the build warns and the
package installs with its pure-Python path (runfold.core.canonical.NATIVE is then False)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "runfold.core._staging",
            sources=["src/runfold/core/_staging.c"],
            optional=True,
        )
    ]
)
