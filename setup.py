"""Dataflow's launcher and workers install the package through setup.py.

The metadata lives in pyproject.toml.
"""

from setuptools import setup

setup()
