"""The build (setup.py): the C kernel compiled once into a static library that every extension
module links, compiles in parallel, the generated C when Cython is absent, and the OS entropy
source built against headers that do not name getrandom (manylinux2014's).

Building the package itself would be too slow for the suite (.ci/run builds the wheel and the
sdist); these tests drive setup.py's commands on toy source trees, with a compiler that only
records its commands or, where one is installed, with the real compiler on a few lines of C.
Tests marked `source_tree` read files of the repository and are skipped when the tests run
against an installed wheel from a copy of tests/.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_SOURCE_TREE = (ROOT / "setup.py").is_file() and (ROOT / "pyproject.toml").is_file()
def _setuptools_version() -> tuple[int, ...]:
    try:
        import setuptools
    except ImportError:  # pragma: no cover
        return (0,)
    return tuple(int(part) for part in setuptools.__version__.split(".")[:2] if part.isdigit())


SETUPTOOLS_VERSION = _setuptools_version()
source_tree = pytest.mark.skipif(not IN_SOURCE_TREE, reason="needs the repository's files")
C_COMPILER = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
# The environment of a child build: no sanitizer runtime preloaded (tools/sanitize.sh), no
# build switch or flags of the developer's, no PYTHONPATH (the toy package must be the one found).
CHILD_ENV = {
    k: v for k, v in os.environ.items()
    if k not in ("LD_PRELOAD", "PYTHONPATH", "CFLAGS", "LDFLAGS") and not k.startswith("DPSELECT_")
}


def write(root: Path, files: dict[str, str], mtime: int | None = None) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        if mtime is not None:
            os.utime(root / rel, (mtime, mtime))


@pytest.fixture
def setup_module(tmp_path, monkeypatch) -> Callable[[], ModuleType]:
    """setup.py loaded as a module (it calls setup() only as __main__) in a toy source tree:
    one module (a .pyx with its generated .c, newer) and a kernel of one source and one header."""
    pytest.importorskip("setuptools")
    write(tmp_path, {"dpselect/_a.pyx": "", "dpselect/_x.pxd": ""}, mtime=1000)
    write(tmp_path, {"dpselect/_a.c": "", "csrc/k.c": "", "csrc/k.h": ""}, mtime=2000)
    monkeypatch.chdir(tmp_path)
    # Make `from Cython.Build import cythonize` fail as if Cython were not installed.
    monkeypatch.setitem(sys.modules, "Cython", None)
    monkeypatch.setitem(sys.modules, "Cython.Build", None)
    for switch in ("DPSELECT_DEBUG_BUILD", "DPSELECT_SANITIZE"):
        monkeypatch.delenv(switch, raising=False)

    def load() -> ModuleType:
        spec = importlib.util.spec_from_file_location("dpselect_setup", ROOT / "setup.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


# --- building from the generated C when Cython is absent --------------------------------------

@source_tree
def test_setup_builds_from_generated_c_without_cython(setup_module):
    (ext,) = setup_module().extensions()
    assert ext.name == "dpselect._a"
    assert ext.sources == [os.path.join("dpselect", "_a.c")]


@source_tree
@pytest.mark.parametrize("newer", ["dpselect/_a.pyx", "dpselect/_x.pxd"])
def test_setup_requires_cython_when_the_c_is_stale(setup_module, newer):
    os.utime(newer, (3000, 3000))
    with pytest.raises(SystemExit, match=r"Cython>=3.0 is needed .*dpselect/_a\.pyx"):
        setup_module().extensions()


@source_tree
def test_setup_requires_cython_when_the_c_is_missing(setup_module):
    os.remove(os.path.join("dpselect", "_a.c"))
    with pytest.raises(SystemExit, match="missing or older"):
        setup_module().extensions()


# --- the kernel: one static library, linked by every module -----------------------------------

@source_tree
def test_every_module_links_the_kernel_library_and_compiles_none_of_it(setup_module):
    """The kernel was compiled into every one of the six modules (a quarter to a third of the build); now
    setup() gets it as one library, and a module's sources are its own C alone."""
    module = setup_module()
    arguments = module.setup_arguments()
    ((name, info),) = arguments["libraries"]
    assert name == module.KERNEL == "dpselect_kernel"
    assert info["sources"] == [os.path.join("csrc", "k.c")]
    assert info["obj_deps"] == {"": [os.path.join("csrc", "k.h")]}  # a header change rebuilds it
    (ext,) = arguments["ext_modules"]
    assert ext.sources == [os.path.join("dpselect", "_a.c")]
    assert ext.libraries[0] == module.KERNEL  # before libm and pthread, which it needs
    assert {os.path.join("csrc", "k.c"), os.path.join("csrc", "k.h")} <= set(ext.depends)
    assert arguments["cmdclass"] == {"build_clib": module.BuildKernel, "build_ext": module.BuildExt}


@source_tree
@pytest.mark.skipif(sys.platform == "win32", reason="the gcc/clang flags")
@pytest.mark.parametrize("switch", [None, "DPSELECT_DEBUG_BUILD", "DPSELECT_SANITIZE"])
def test_the_kernel_is_compiled_with_the_modules_flags(setup_module, monkeypatch, switch):
    """The same optimisation, standard, visibility, debug information and sanitizers as the
    modules, plus -fPIC (its objects go into shared objects)."""
    if switch:
        monkeypatch.setenv(switch, "1")
    module = setup_module()
    ((_, info),) = module.setup_arguments()["libraries"]
    (ext,) = module.setup_arguments()["ext_modules"]
    assert info["cflags"] == [*ext.extra_compile_args, "-fPIC"]
    assert {"-O3", "-std=c11", "-fvisibility=hidden"} <= set(info["cflags"])
    stripped = sys.platform.startswith("linux") and switch is None
    assert ("-g0" in info["cflags"]) == (switch is None)
    assert ("-Wl,--strip-all" in ext.extra_link_args) == stripped
    sanitized = switch == "DPSELECT_SANITIZE"
    assert ("-fsanitize=address,undefined" in info["cflags"]) == sanitized
    assert ("-fsanitize=address,undefined" in ext.extra_link_args) == sanitized


def recording_compiler(commands: tuple[type, ...], monkeypatch, on_compile: Callable[[str], None]) -> list[list[str]]:
    """One Unix compiler for every command of this build that runs nothing: it records each
    command line (compile, archive, link) in order and creates the file it would write."""
    # the distutils that the commands come from (setuptools vendors one)
    owners = {sys.modules[k.__module__] for c in commands for k in c.__mro__ if k.__module__ in sys.modules}
    owners = {m for m in owners if "new_compiler" in vars(m)}
    compiler = vars(next(iter(owners)))["new_compiler"](compiler="unix")
    recorded: list[list[str]] = []
    lock = threading.Lock()

    def spawn(cmdline, **kwargs) -> None:
        cmdline = [str(a) for a in cmdline]
        if "-c" in cmdline:
            on_compile(cmdline[cmdline.index("-c") + 1])
        out = cmdline[cmdline.index("-o") + 1] if "-o" in cmdline else next(a for a in cmdline if a.endswith(".a"))
        with lock:
            recorded.append(cmdline)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text("")

    compiler.spawn = compiler.call = spawn  # `call` in recent distutils, `spawn` before
    for owner in owners:
        monkeypatch.setattr(owner, "new_compiler", lambda **kwargs: compiler)
    return recorded


@source_tree
@pytest.mark.skipif(sys.platform == "win32", reason="records a Unix compiler's command lines")
@pytest.mark.skipif(SETUPTOOLS_VERSION < (77,), reason="the build runs with setuptools>=77 (pyproject.toml's "
                    "[build-system]); this environment's older setuptools makes its compiler elsewhere")
def test_the_kernel_is_compiled_once_in_parallel_and_linked_by_every_module(setup_module, tmp_path, monkeypatch):
    """`build_ext -j 2` alone (as `setup.py build_ext --inplace` runs it): the kernel's two
    sources are each compiled once, two at once (a barrier both must reach), archived once,
    before any module links; each module links only its own object and the archive."""
    from setuptools import Distribution

    write(tmp_path, {"csrc/k2.c": ""})
    module = setup_module()
    names = ["dpselect._a", "dpselect._b", "dpselect._c", "dpselect._d"]
    sources = [f"{name.replace('.', '/')}.c" for name in names]
    write(tmp_path, {source: "" for source in sources})
    dist = Distribution({
        "name": "toy",
        "libraries": [module.kernel_library()],
        "ext_modules": [module.extension(name, source) for name, source in zip(names, sources)],
        "cmdclass": {"build_clib": module.BuildKernel, "build_ext": module.BuildExt},
    })
    cmd = dist.get_command_obj("build_ext")
    cmd.parallel = 2
    together = threading.Barrier(2, timeout=60)
    kernel = [os.path.join("csrc", "k.c"), os.path.join("csrc", "k2.c")]

    def on_compile(source: str) -> None:
        if source in kernel:
            together.wait()  # both kernel sources compiling at the same moment

    commands = recording_compiler((module.BuildExt, module.BuildKernel), monkeypatch, on_compile)
    cmd.ensure_finalized()
    cmd.run()

    compiled = [c[c.index("-c") + 1] for c in commands if "-c" in c]
    assert sorted(compiled) == sorted(kernel + sources)  # the kernel once, not once per module
    for c in commands:
        if "-c" in c and c[c.index("-c") + 1] in kernel:
            assert "-fPIC" in c and "-fvisibility=hidden" in c
    # (macOS runs ranlib on the archive afterwards: a command without objects)
    (archive,) = [i for i, c in enumerate(commands) if "-o" not in c and any(a.endswith(".o") for a in c)]
    kernel_objects = [a for a in commands[archive] if a.endswith(".o")]
    assert sorted(os.path.basename(o) for o in kernel_objects) == ["k.o", "k2.o"]
    links = [i for i, c in enumerate(commands) if "-o" in c and "-c" not in c]
    assert len(links) == len(names) and archive < min(links)
    library_dir = os.path.dirname(next(a for a in commands[archive] if a.endswith(".a")))
    for i in links:
        link = commands[i]
        objects = [a for a in link if a.endswith(".o")]
        assert len(objects) == 1 and objects[0] not in kernel_objects, link
        libraries = [a for a in link if a.startswith("-l")]
        assert libraries[0] == "-ldpselect_kernel", link
        assert f"-L{library_dir}" in link, link


@source_tree
@pytest.mark.parametrize("asked, expected", [(None, 7), (1, 1), ("3", 3)])
def test_the_build_compiles_in_parallel_unless_told(setup_module, monkeypatch, asked, expected):
    """Every install builds six large generated C files and the kernel: by default one per core
    at a time (`build_ext -j N`, or `--parallel`, still decides, for the kernel too)."""
    from setuptools import Distribution

    module = setup_module()
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    dist = Distribution({
        "name": "toy",
        "libraries": [module.kernel_library()],
        "ext_modules": [module.extension("dpselect._a", "dpselect/_a.c")],
        "cmdclass": {"build_clib": module.BuildKernel, "build_ext": module.BuildExt},
    })
    cmd = dist.get_command_obj("build_ext")
    cmd.parallel = asked
    cmd.ensure_finalized()
    assert cmd.parallel == expected
    clib = dist.get_command_obj("build_clib")
    clib.ensure_finalized()
    assert clib.parallel == 7  # run alone (`setup.py build`, the wheel builds): one per core


TOY_MODULE = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "counter.h"

static PyObject *bump(PyObject *self, PyObject *unused) { return PyLong_FromLong(dps_toy_bump()); }
static PyMethodDef methods[] = {{"bump", bump, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, "NAME", NULL, -1, methods};
PyMODINIT_FUNC PyInit_NAME(void) { return PyModule_Create(&definition); }
"""


@source_tree
@pytest.mark.skipif(not sys.platform.startswith("linux") or C_COMPILER is None or shutil.which("nm") is None,
                    reason="builds with the C compiler and reads ELF symbol tables with nm")
def test_a_real_build_gives_every_module_its_own_hidden_copy_of_the_kernel(tmp_path):
    """`setup.py build_ext --inplace` on two modules and a kernel with static data: the kernel is
    compiled once, each module has its own copy of its static data (as when each compiled the
    kernel itself), exports nothing but PyInit_* (the kernel's symbols stay hidden, so one
    module's kernel can never stand in for another's) and is stripped."""
    pytest.importorskip("setuptools")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        pytest.skip("no Python.h (Python's development headers) to build against")
    write(tmp_path, {
        "csrc/counter.h": "int dps_toy_bump(void);\n",
        "csrc/counter.c": '#include "counter.h"\nstatic int calls;\nint dps_toy_bump(void) { return ++calls; }\n',
    })
    write(tmp_path, {"dpselect/_a.pyx": "", "dpselect/_b.pyx": ""}, mtime=1000)
    write(tmp_path, {f"dpselect/_{m}.c": TOY_MODULE.replace("NAME", f"_{m}") for m in "ab"}, mtime=2000)
    build = (
        "import runpy, sys; sys.modules['Cython'] = sys.modules['Cython.Build'] = None; "
        "sys.argv = ['setup.py', '-q', 'build_ext', '--inplace', '-j', '2']; "
        f"runpy.run_path({str(ROOT / 'setup.py')!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", build], cwd=tmp_path, env=CHILD_ENV,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    objects = sorted(p.name for p in (tmp_path / "build").rglob("*.o"))
    assert objects == ["_a.o", "_b.o", "counter.o"]

    calls = "import dpselect._a as a, dpselect._b as b; print(a.bump(), a.bump(), b.bump())"
    run = subprocess.run([sys.executable, "-S", "-c", calls],
                         cwd=tmp_path, env=CHILD_ENV, capture_output=True, text=True, check=False)
    assert run.stdout.split() == ["1", "2", "1"], run.stderr
    for m in "ab":
        (so,) = (tmp_path / "dpselect").glob(f"_{m}.*.so")
        exported = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True)
        names = {line.split()[-1] for line in exported.stdout.splitlines()}
        assert f"PyInit__{m}" in names and "dps_toy_bump" not in names, names
        table = subprocess.run(["nm", str(so)], capture_output=True, text=True, check=False)
        assert "no symbols" in table.stderr, f"{so.name} is not stripped"


# --- the OS entropy source without getrandom in the headers ----------------------------------

# Includes csrc/os_entropy.c itself, after every header it includes (so that theirs are no-ops
# and the macro below only renames its own call), counting the opens of /dev/urandom.
ENTROPY_HARNESS = """
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef HIDE_GETRANDOM /* as kernel headers before 3.17 (CentOS 7's, manylinux2014's) */
#undef SYS_getrandom
#undef __NR_getrandom
#endif

static int urandom_opens;
static int counting_open(const char *path, int flags) {
    if (strcmp(path, "/dev/urandom") == 0) urandom_opens++;
    return open(path, flags);
}
#define open counting_open
#include "os_entropy.c"
#undef open

int main(void) {
    uint8_t buf[1000]; /* several getrandom requests of at most 256 bytes */
    memset(buf, 0, sizeof buf);
    if (dps_os_entropy(buf, sizeof buf) != 0) return 1;
    int zeros = 0;
    for (size_t i = 0; i < sizeof buf; i++) zeros += buf[i] == 0;
    printf("%d %d\\n", urandom_opens, zeros);
    return 0;
}
"""


@source_tree
@pytest.mark.skipif(not sys.platform.startswith("linux") or C_COMPILER is None,
                    reason="compiles csrc/os_entropy.c for Linux with the C compiler")
@pytest.mark.parametrize("defines, opens", [
    pytest.param([], 0, id="getrandom"),
    # manylinux2014's headers: still getrandom, by its number in the architecture's kernel ABI
    pytest.param(["-DHIDE_GETRANDOM"], 0, id="old-headers",
                 marks=pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64", "i686"),
                                          reason="no getrandom number given for this architecture")),
    # an architecture without one given, or a build that asks: /dev/urandom only
    pytest.param(["-DHIDE_GETRANDOM", "-DDPS_NO_GETRANDOM"], 1, id="urandom"),
])
def test_os_entropy_builds_without_getrandom_in_the_headers(tmp_path, defines, opens):
    harness = tmp_path / "harness.c"
    harness.write_text(ENTROPY_HARNESS)
    program = tmp_path / "harness"
    built = subprocess.run([C_COMPILER, "-std=c11", "-O1", "-Wall", *defines, "-I", str(ROOT / "csrc"),
                            str(harness), "-o", str(program)], env=CHILD_ENV, capture_output=True, text=True,
                           check=False)
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(program)], env=CHILD_ENV, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    urandom_opens, zeros = map(int, done.stdout.split())
    assert urandom_opens == opens
    # 1000 bytes from the OS: about 4 zero bytes; 50 or more has probability below 1e-20.
    assert zeros < 50
