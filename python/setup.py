# SPDX-License-Identifier: Apache-2.0
# gradsync_torch: the "gradsync" backend of torch.distributed. Built against the installed
# torch (Debian's python3-torch 1.13) with the system g++ at C++20, and Open MPI:
#   python3 -m venv --system-site-packages V && V/bin/pip install --no-build-isolation ./python
# gradsync's headers come from ../include (this file's directory's parent).
import os
import shlex
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.normpath(os.path.join(HERE, "..", "include"))
if not os.path.isfile(os.path.join(INCLUDE, "gradsync", "gradsync.hpp")):
    raise SystemExit(f"gradsync_torch: gradsync's headers are not in {INCLUDE}; "
                     "build from a gradsync checkout (python/ next to include/)")


def open_mpi_flags():
    """Compile and link flags of Open MPI's C API (its C++ bindings stay out)."""
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags", "ompi-c"], text=True)
        libs = subprocess.check_output(["pkg-config", "--libs", "ompi-c"], text=True)
    except (OSError, subprocess.CalledProcessError):
        try:
            cflags = subprocess.check_output(["mpicc.openmpi", "--showme:compile"], text=True)
            libs = subprocess.check_output(["mpicc.openmpi", "--showme:link"], text=True)
        except (OSError, subprocess.CalledProcessError):
            raise SystemExit("gradsync_torch needs Open MPI's development files "
                             "(Debian: libopenmpi-dev; pkg-config ompi-c or mpicc.openmpi)")
    return shlex.split(cflags), shlex.split(libs)


mpi_cflags, mpi_libs = open_mpi_flags()
# torch's headers as system headers: -Wall -Wextra then speak of this package's code only.
torch_system = [f for d in include_paths() for f in ("-isystem", d)]
sources = ["module.cpp", "process_group.cpp", "launch.cpp", "engine_shm.cpp", "engine_mpi.cpp",
           "engine_two_level.cpp", "gradsync_src.cpp", "exact.cpp"]
# GRADSYNC_TORCH_OPT: the optimisation level (default 2). gradsync's test build sets its
# -Dbench_optimization (1 there: the backend's tests and benchmark smoke, not timed).
opt = os.environ.get("GRADSYNC_TORCH_OPT", "2")
if opt not in ("0", "1", "2", "3"):
    raise SystemExit(f"gradsync_torch: GRADSYNC_TORCH_OPT={opt!r}; use 0, 1, 2 or 3")
cxx = ["-std=c++20", f"-O{opt}", "-g0", "-Wall", "-Wextra", "-DGRADSYNC_SEPARATE_COMPILATION",
       "-DOMPI_SKIP_MPICXX=1", "-D_FILE_OFFSET_BITS=64"] + torch_system + mpi_cflags

# GRADSYNC_TORCH_BUILD_DIR: where the objects go (the meson build keeps them in its own
# directory, so that two builds never share python/build).
build_dir = os.environ.get("GRADSYNC_TORCH_BUILD_DIR")

setup(
    name="gradsync_torch",
    version="0.2.0",
    description="The 'gradsync' backend of torch.distributed (gradsync over shm and MPI)",
    license="Apache-2.0",
    packages=["gradsync_torch"],
    ext_modules=[
        CppExtension(
            name="gradsync_torch._C",
            sources=[os.path.join("csrc", s) for s in sources],
            include_dirs=[INCLUDE],
            extra_compile_args={"cxx": cxx},
            extra_link_args=mpi_libs + ["-pthread"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    options={"build": {"build_base": build_dir}} if build_dir else {},
    python_requires=">=3.9",
)
