"""Build the C kernel once, and every ``dpselect/*.pyx`` as one extension module linking it.

The kernel, ``csrc/*.c`` (plain C11, no Python headers), is compiled once into a static library,
``dpselect_kernel`` (``kernel_library()``, built by ``build_clib``, which ``build_ext`` runs first),
and every extension module links it, so no shared C library has to be shipped. The kernel's
objects are compiled in parallel (``-j``, as the modules are) with the modules' flags plus
``-fPIC``; its ISA-specific files (``select_avx2.c``, ``select_avx512.c``, ``release_avx512.c``)
need no flag of their own: each marks its functions ``__attribute__((target(...)))`` and picks
them at run time with ``__builtin_cpu_supports``.

Every extension module is its own shared object, and the linker copies into it the kernel objects
it uses, static data included: each module has a private copy of the kernel's static data, exactly
as when every module compiled all of ``csrc/*.c`` itself. That is why the per-thread CSPRNG states
and the fork counter are owned by ``dpselect._rng`` alone: other modules get their state through
its cimported ``begin_batch``, so one consistent set of states and fork checks serves the whole
package.

Cython is needed only to turn a ``.pyx`` into C. The sdist carries the generated
``dpselect/_*.c``, so ``pip install --no-build-isolation`` from it works without Cython; Cython
is required when a ``.c`` is missing (a git checkout) or older than its ``.pyx`` or a ``.pxd``.

Binaries are built without debug information and stripped (the wheels were ~1.7 MB per module,
mostly DWARF); set ``DPSELECT_DEBUG_BUILD=1`` to keep the symbols for a debugger or profiler.

``DPSELECT_SANITIZE=1`` (gcc or clang, not Windows) builds the kernel and the modules with
AddressSanitizer and UndefinedBehaviorSanitizer, every undefined-behaviour report fatal, at -O1
with debug information and frame pointers, unstripped. Such modules only load with the ASan
runtime preloaded into the interpreter: use ``tools/sanitize.sh``, which builds them in a
temporary copy of the tree and runs the test suite under them (docs/testing.md, "Sanitizers").
"""
from __future__ import annotations

import glob
import itertools
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from setuptools import Extension, setup
from setuptools.command.build_clib import build_clib
from setuptools.command.build_ext import build_ext

KERNEL = "dpselect_kernel"
C_SOURCES = sorted(glob.glob(os.path.join("csrc", "*.c")))
C_HEADERS = sorted(glob.glob(os.path.join("csrc", "*.h")))
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
    kernel_compile_args = list(extra_compile_args)
    extra_link_args: list[str] = []
    system_libraries = ["bcrypt"]
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
    system_libraries = ["pthread", "m"] if sys.platform.startswith("linux") else []
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
    # Its objects end up inside shared objects (Python's CFLAGS usually carry -fPIC already).
    kernel_compile_args = [*extra_compile_args, "-fPIC"]


def kernel_library() -> tuple[str, dict[str, Any]]:
    """``setup(libraries=...)``'s entry for the kernel: ``csrc/*.c`` into ``lib<KERNEL>.a``."""
    return (
        KERNEL,
        {
            "sources": C_SOURCES,
            "include_dirs": ["csrc"],
            "cflags": kernel_compile_args,
            # An object is rebuilt when its source or any kernel header is newer.
            "obj_deps": {"": C_HEADERS},
        },
    )


def default_jobs() -> int:
    # Six modules, each a large generated C file: on a 2-core machine compiling two at a time
    # halves the build, which every install and every CI step pays. `-j N` still wins.
    return os.cpu_count() or 1


class BuildKernel(build_clib):
    """``build_clib`` that compiles a library's sources in parallel, each only when out of date.

    setuptools' own compiles every source one after the other, and all of them as soon as one is
    out of date. ``-j N`` (or ``build -j N``, or ``build_ext -j N``, which runs this first) sets
    the number of compilers at once; the default is one per core."""

    user_options: ClassVar[list[tuple[str, str | None, str]]] = [
        *build_clib.user_options,
        ("parallel=", "j", "number of parallel compile jobs"),
    ]

    parallel: int | str | None

    def initialize_options(self) -> None:
        super().initialize_options()
        self.parallel = None

    def finalize_options(self) -> None:
        super().finalize_options()
        self.set_undefined_options("build", ("parallel", "parallel"))
        self.parallel = int(self.parallel) if self.parallel else default_jobs()

    def build_libraries(self, libraries: list[tuple[str, dict[str, Any]]]) -> None:
        for name, info in libraries:
            sources = sorted(info["sources"])
            objects = self.compiler.object_filenames(sources, output_dir=self.build_temp)
            deps = info.get("obj_deps", {})
            stale = [
                source
                for source, obj in zip(sources, objects)
                if self.force or newer_than(obj, [source, *deps.get("", []), *deps.get(source, [])])
            ]

            # MSVC's compiler looks for its tools on first use: once, before the threads start.
            if stale and not getattr(self.compiler, "initialized", True):
                self.compiler.initialize()
            jobs = int(self.parallel or default_jobs())
            with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(stale)))) as pool:
                list(pool.map(self.compile_source, stale, itertools.repeat(info)))  # raises the first error
            # Archived afresh every time (milliseconds): `ar` only adds and replaces members, so
            # the object of a deleted source would stay in an archive that is updated.
            library = self.compiler.library_filename(name, output_dir=self.build_clib)
            if os.path.exists(library):
                os.remove(library)
            self.compiler.create_static_lib(objects, name, output_dir=self.build_clib, debug=self.debug)

    def compile_source(self, source: str, info: dict[str, Any]) -> list[str]:
        return self.compiler.compile(
            [source],
            output_dir=self.build_temp,
            macros=info.get("macros"),
            include_dirs=info.get("include_dirs"),
            extra_postargs=info.get("cflags"),
            debug=self.debug,
        )


def newer_than(target: str, sources: list[str]) -> bool:
    """Whether ``target`` is missing or older than any of ``sources``."""
    if not os.path.exists(target):
        return True
    mtime = os.path.getmtime(target)
    return any(os.path.getmtime(source) > mtime for source in sources)


class BuildExt(build_ext):
    """``build_ext`` that builds the kernel library first, with the same ``-j`` and ``--force``.

    Plain ``build_ext`` only links the libraries of ``build_clib``; ``setup.py build`` and the
    wheel builds run ``build_clib`` before it, but ``setup.py build_ext --inplace`` alone would
    not. Each module's own source is distinct (``dpselect/_x.c`` → ``<build_temp>/dpselect/_x.o``),
    so modules built at once (``-j``) never share an object file."""

    def finalize_options(self) -> None:
        if self.parallel is None:
            self.parallel = default_jobs()
        super().finalize_options()

    def run(self) -> None:
        if self.distribution.has_c_libraries():
            clib = self.get_finalized_command("build_clib")
            clib.parallel = self.parallel
            clib.force = clib.force or self.force
            self.run_command("build_clib")
        super().run()


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
    """One module: its own source only, linked with the kernel library (``kernel_library()``).

    The kernel comes first among the libraries: a linker that drops a shared library nothing
    before it needs (``--as-needed``, Ubuntu's default) would otherwise drop libm and pthread
    before the kernel's objects asked for them (``build_ext`` names it once more, last, for every
    library of ``setup(libraries=...)``: harmless). A change to the kernel rebuilds the module."""
    return Extension(
        name,
        sources=[main_source],
        include_dirs=["csrc"],
        depends=[*C_SOURCES, *C_HEADERS],
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
        libraries=[KERNEL, *system_libraries],
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


def setup_arguments() -> dict[str, Any]:
    """What ``setup()`` is given: the kernel library, the modules and the two build commands."""
    return {
        "libraries": [kernel_library()],
        "ext_modules": extensions(),
        "cmdclass": {"build_clib": BuildKernel, "build_ext": BuildExt},
    }


if __name__ == "__main__":
    setup(**setup_arguments())
