"""Build the C kernel: every ``dpselect/*.pyx`` becomes one extension module.

Each extension is compiled together with all of ``csrc/*.c`` (plain C11, no Python headers), so
no shared C library has to be shipped. The per-thread CSPRNG states and the fork counter are
owned by ``dpselect._rng`` alone: other modules get their state through its cimported
``begin_batch``, so one consistent set of states and fork checks serves the whole package.
"""
from __future__ import annotations

import glob
import os
import sys

from setuptools import Extension, setup
from Cython.Build import cythonize

HERE = os.path.dirname(os.path.abspath(__file__))
C_SOURCES = sorted(glob.glob(os.path.join("csrc", "*.c")))

if sys.platform == "win32":
    extra_compile_args = ["/O2", "/std:c11"]
    extra_link_args: list[str] = []
    libraries = ["bcrypt"]
else:
    extra_compile_args = [
        "-O3",
        "-std=c11",
        "-fvisibility=hidden",
        "-Wall",
        "-Wno-unused-function",
        "-Wno-unreachable-code-fallthrough",
    ]
    extra_link_args = []
    libraries = ["pthread"] if sys.platform.startswith("linux") else []


def extension(pyx: str) -> Extension:
    name = "dpselect." + os.path.splitext(os.path.basename(pyx))[0]
    return Extension(
        name,
        sources=[pyx, *C_SOURCES],
        include_dirs=["csrc"],
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
        libraries=libraries,
    )


extensions = [extension(p) for p in sorted(glob.glob(os.path.join("dpselect", "*.pyx")))]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
            "embedsignature": True,
        },
    ),
)
