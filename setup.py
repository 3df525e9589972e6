"""Build the C kernel: every ``dpselect/*.pyx`` becomes one extension module.

Each extension is compiled together with all of ``csrc/*.c`` (plain C11, no Python headers), so
no shared C library has to be shipped. The per-thread CSPRNG states and the fork counter are
owned by ``dpselect._rng`` alone: other modules get their state through its cimported
``begin_batch``, so one consistent set of states and fork checks serves the whole package.

Cython is needed only to turn a ``.pyx`` into C. The sdist carries the generated
``dpselect/_*.c``, so ``pip install --no-build-isolation`` from it works without Cython; Cython
is required when a ``.c`` is missing (a git checkout) or older than its ``.pyx`` or a ``.pxd``.

Binaries are built without debug information and stripped (the wheels were ~1.7 MB per module,
mostly DWARF); set ``DPSELECT_DEBUG_BUILD=1`` to keep the symbols for a debugger or profiler.

``DPSELECT_SANITIZE=1`` (gcc or clang, not Windows) builds with AddressSanitizer and
UndefinedBehaviorSanitizer, every undefined-behaviour report fatal, at -O1 with debug information
and frame pointers, unstripped. Such modules only load with the ASan runtime preloaded into the
interpreter: use ``tools/sanitize.sh``, which builds them in a temporary copy of the tree and runs
the test suite under them (docs/testing.md, "Sanitizers").
"""
from __future__ import annotations

import glob
import os
import sys
import threading

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
C_SOURCES = sorted(glob.glob(os.path.join("csrc", "*.c")))
PYX_SOURCES = sorted(glob.glob(os.path.join("dpselect", "*.pyx")))
# Every .pyx cimports from these, so a change to any of them invalidates every generated .c.
PXD_SOURCES = sorted(glob.glob(os.path.join("dpselect", "*.pxd")))

CYTHON_DIRECTIVES = {
    "boundscheck": False,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": False,
    "embedsignature": True,
}

DEBUG_BUILD = os.environ.get("DPSELECT_DEBUG_BUILD", "") not in ("", "0")
SANITIZE = os.environ.get("DPSELECT_SANITIZE", "") not in ("", "0")
SANITIZER_FLAGS = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",  # any undefined behaviour aborts the process
    "-fno-omit-frame-pointer",
    "-O1",  # after -O3: the later level wins
    "-g",
]

if sys.platform == "win32":
    if SANITIZE:
        raise SystemExit("dpselect: DPSELECT_SANITIZE=1 needs gcc or clang (Linux or macOS)")
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
    libraries = ["pthread", "m"] if sys.platform.startswith("linux") else []
    if SANITIZE:
        # Symbols and line numbers stay, so that every report names the function and line.
        extra_compile_args += SANITIZER_FLAGS
        extra_link_args += SANITIZER_FLAGS
    elif not DEBUG_BUILD:
        # Python's own CFLAGS carry -g; a later -g0 wins.
        extra_compile_args.append("-g0")
        if sys.platform.startswith("linux"):
            # Drop the static symbol table too; PyInit_* stays in the dynamic one.
            extra_link_args.append("-Wl,--strip-all")


class BuildExtPerModuleTemp(build_ext):
    """``build_ext`` that compiles each extension in its own directory, ``<build_temp>/<module>/``.

    Every extension compiles all of ``csrc/*.c``, and distutils names an object file after its
    source alone, so every module wrote ``<build_temp>/csrc/select.o``: with ``build_ext -j 2``
    two modules built at once could rewrite an object while the other was linking it. The
    parallel build runs ``build_extension`` in worker threads that share this command object, so
    the per-module directory is kept per thread (``build_temp`` reads it while a module builds);
    everywhere else ``build_temp`` is the shared directory, as before."""

    _shared_build_temp: str | None = None

    def _per_thread(self) -> threading.local:
        local = self.__dict__.get("_local")
        if local is None:  # made in the main thread, before any worker starts
            local = self.__dict__["_local"] = threading.local()
        return local

    @property  # type: ignore[override]
    def build_temp(self) -> str | None:
        return getattr(self._per_thread(), "build_temp", None) or self._shared_build_temp

    @build_temp.setter
    def build_temp(self, value: str | None) -> None:
        self._shared_build_temp = value

    def finalize_options(self) -> None:
        # Six modules, each a large generated C file: on a 2-core machine compiling two at a time
        # halves the build, which every install and every CI step pays. `-j N` still wins.
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1
        super().finalize_options()

    def build_extensions(self) -> None:
        self._per_thread()
        super().build_extensions()

    def build_extension(self, ext: Extension) -> None:
        local = self._per_thread()
        local.build_temp = os.path.join(self._shared_build_temp or "build", *ext.name.split("."))
        try:
            super().build_extension(ext)
        finally:
            del local.build_temp


def generated_c(pyx: str) -> str:
    return os.path.splitext(pyx)[0] + ".c"


def stale_c_sources(pyx_sources: list[str], pxd_sources: list[str]) -> list[str]:
    """The ``.pyx`` whose generated ``.c`` is missing or older than it or than any ``.pxd``."""
    stale = []
    for pyx in pyx_sources:
        c_file = generated_c(pyx)
        if not os.path.exists(c_file):
            stale.append(pyx)
            continue
        c_mtime = os.path.getmtime(c_file)
        if any(os.path.getmtime(dep) > c_mtime for dep in [pyx, *pxd_sources]):
            stale.append(pyx)
    return stale


def extension(name: str, main_source: str) -> Extension:
    return Extension(
        name,
        sources=[main_source, *C_SOURCES],
        include_dirs=["csrc"],
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
        libraries=libraries,
    )


def module_name(pyx: str) -> str:
    return "dpselect." + os.path.splitext(os.path.basename(pyx))[0]


def extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        cythonize = None
    if cythonize is not None:
        # cythonize regenerates a .c only when its .pyx or a dependency changed.
        return cythonize(
            [extension(module_name(pyx), pyx) for pyx in PYX_SOURCES],
            language_level=3,
            compiler_directives=CYTHON_DIRECTIVES,
            nthreads=os.cpu_count() or 1,  # one .pyx per process
        )
    stale = stale_c_sources(PYX_SOURCES, PXD_SOURCES)
    if stale:
        raise SystemExit(
            "dpselect: Cython>=3.0 is needed to build from this tree, because the generated C "
            f"is missing or older than its Cython source for: {', '.join(stale)}. "
            'Install it (pip install "Cython>=3.0"), or build with build isolation (plain '
            "`pip install .`), which installs it for the build."
        )
    return [extension(module_name(pyx), generated_c(pyx)) for pyx in PYX_SOURCES]


if __name__ == "__main__":
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExtPerModuleTemp})
