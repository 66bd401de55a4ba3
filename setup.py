"""The compiled extensions; everything else about the package is in setup.cfg.

kafkalite.record._speedups (C) is the compiled twin of the record codec's hot loops,
kafkalite.client._speedups that of the producer's per-record send path, and
kafkalite.security._tls_records decrypts the TLS records a client receives with the
interpreter lock released once per read (kafkalite/security/tls_stream.py). They are optional: on
a machine without a C compiler or Python's headers ``pip install`` skips them with a warning,
and kafkalite runs its pure-Python code (kafkalite/record/speedups.py and
kafkalite/client/producer_core.py decide; ``KAFKALITE_NO_EXTENSIONS=1`` forces the Python code).
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
        Extension(
            "kafkalite.client._speedups",
            sources=["kafkalite/client/_speedups.c"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"],
            optional=True,
        ),
        Extension(
            "kafkalite.security._tls_records",
            sources=["kafkalite/security/_tls_records.c"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"],
            libraries=["dl"],
            optional=True,
        ),
    ],
)
