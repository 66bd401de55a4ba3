"""The compiled extension; everything else about the package is in setup.cfg.

kafkalite.record._speedups (C) is the compiled twin of the record codec's hot loops. It is
optional: on a machine without a C compiler or Python's headers ``pip install`` skips it with a
warning, and kafkalite runs its pure-Python code (kafkalite/record/speedups.py decides, and
``KAFKALITE_NO_EXTENSIONS=1`` forces the Python code).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafkalite.record._speedups",
            sources=["kafkalite/record/_speedups.c"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"],
            optional=True,
        ),
    ],
)
