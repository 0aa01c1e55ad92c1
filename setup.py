"""Package discovery: ``readers/``, ``ops/`` and ``examples/`` live at the top of the repository
and install as ``streamtrain.readers``, ``streamtrain.ops`` and ``streamtrain.examples``, so the
distribution puts one import name into site-packages. Every package below those folders (a folder
with an ``__init__.py``) is found here, never listed by hand; ``tests/test_wheel.py`` builds the
wheel and checks that it holds every package folder and every data file of the tree. The rest of
the metadata is in ``pyproject.toml``."""
from setuptools import find_packages, setup

FOLDERS = {"streamtrain": "streamtrain", "streamtrain.readers": "readers", "streamtrain.ops": "ops",
           "streamtrain.examples": "examples"}

setup(
    package_dir=FOLDERS,
    packages=[f"{name}.{sub}" if sub else name
              for name, folder in FOLDERS.items() for sub in ["", *find_packages(folder)]],
    package_data={"streamtrain.examples": ["*.json"]},
)
