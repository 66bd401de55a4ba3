"""Contract suites: one set of tests run against every implementation of a seam.

A suite here is a class whose name does not start with ``Test`` (pytest does not collect it on
its own); ``tests/unit`` and ``tests/integration`` subclass it once per implementation and give
it the fixture it needs.
"""
