"""What the Python tests share: herd's binary and its MPI launcher (set by ctest)."""
import os
import shlex

import pytest

HERD = os.environ.get("HERD_BINARY", "herd")
# A repeat pass (make test's MPICH pass: HERD_TEST_REPEAT=1) runs one of each path.
REPEAT = os.environ.get("HERD_TEST_REPEAT") == "1"


def launcher(np_):
    """The launcher's command for np_ ranks; skips the test without MPI."""
    # ctest sets HERD_MPIEXEC only in a build with MPI (herd --version would say so too,
    # but loads cuBLAS to name its version: 0.4 s of CPU a call).
    exe = os.environ.get("HERD_MPIEXEC")
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing")
    return [exe, *shlex.split(os.environ.get("HERD_MPIEXEC_PREFLAGS", "")), "-np", str(np_)]
