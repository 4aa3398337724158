"""Build the driver-API launcher and ship the CUDA sources inside the package.

The launcher (csrc/launcher/launcher.cpp) is plain C++ with pybind11: it opens
libcuda at run time with dlopen, so it builds on a machine with no GPU and no
CUDA driver, and importing it touches no driver. The kernels themselves are
compiled at run time by chord_kernels.jit from the sources in csrc/, which a
wheel carries as chord_kernels/csrc (an editable install reads the repo's csrc/).
"""

import os
import shutil

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_CSRC = os.path.normpath(os.path.join(HERE, "..", "..", "csrc"))
CSRC = REPO_CSRC if os.path.isdir(REPO_CSRC) else os.path.join(HERE, "chord_kernels", "csrc")


class BuildPyWithCsrc(build_py):
    """Copy the repository's csrc/ into the built package (wheel installs)."""

    def run(self):
        # setuptools builds in place (build/lib) and never deletes there: a module that became a
        # package (dispatch.py -> dispatch/) would ship twice from a tree built before the change.
        shutil.rmtree(os.path.join(self.build_lib, "chord_kernels"), ignore_errors=True)
        super().run()
        if os.path.isdir(REPO_CSRC):
            dest = os.path.join(self.build_lib, "chord_kernels", "csrc")
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(REPO_CSRC, dest, ignore=shutil.ignore_patterns("__pycache__"))


launcher = Pybind11Extension(
    "chord_kernels._launcher",
    [os.path.relpath(os.path.join(CSRC, "launcher", "launcher.cpp"), HERE)],
    cxx_std=17,
    libraries=["dl"],
)

setup(ext_modules=[launcher], cmdclass={"build_py": BuildPyWithCsrc})
