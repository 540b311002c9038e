"""Packaging: the one import package ``eosink`` is built from three top-level folders.

``sdk/`` is ``eosink``, ``connectors/`` is ``eosink.connectors`` and ``contracts/`` is
``eosink.contracts`` (pyproject.toml holds everything else). Packages are found here, so a new
connector's folder is packaged without editing a list.
"""

from setuptools import find_packages, setup

ROOTS = {"eosink": "sdk", "eosink.connectors": "connectors", "eosink.contracts": "contracts"}

packages = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]
# The cookiecutter template of `eosink new-connector`: data only (its .py files are Jinja templates).
packages.append("eosink.contracts.template")

setup(packages=packages, package_dir=ROOTS)
