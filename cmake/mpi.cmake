# MPI detection. HERD_MPI=AUTO builds with the system's default MPI when one is found,
# ON makes it required, OFF builds the single-process library; openmpi or mpich picks
# that family through its own compiler wrapper (mpicc.openmpi, mpicc.mpich), whatever
# the system's default is. Sets:
#   HERD_WITH_MPI          ON/OFF
#   HERD_MPI_FAMILY        openmpi, mpich or other (from the library found)
#   HERD_MPIEXEC           the launcher of that MPI (mpirun.openmpi, mpiexec.hydra), not
#                          whatever mpiexec comes first on PATH
#   HERD_MPIEXEC_PREFLAGS  what the tests give it to run more ranks than cores
#   HERD_OTHER_MPIEXEC(_PREFLAGS)  the other family's launcher, when installed: a test
#                          checks that herd refuses to run under it
#   HERD_PC_MPI_LIBS       the MPI libraries for herd.pc's Libs.private
set(HERD_WITH_MPI OFF)
set(HERD_MPI_FAMILY "")
set(HERD_MPIEXEC "")
set(HERD_MPIEXEC_PREFLAGS "")
set(HERD_OTHER_MPIEXEC "")
set(HERD_OTHER_MPIEXEC_PREFLAGS "")
set(HERD_PC_MPI_LIBS "")

# FindMPI caches what it found: switching families needs a fresh build directory.
if(DEFINED HERD_MPI_CONFIGURED AND NOT HERD_MPI_CONFIGURED STREQUAL HERD_MPI)
  message(FATAL_ERROR "herd: this build directory was configured with HERD_MPI=${HERD_MPI_CONFIGURED}; "
                      "use a fresh build directory for HERD_MPI=${HERD_MPI}")
endif()
set(HERD_MPI_CONFIGURED "${HERD_MPI}" CACHE INTERNAL "HERD_MPI of the first configuration")

if(HERD_MPI STREQUAL "openmpi" OR HERD_MPI STREQUAL "mpich")
  if(HERD_MPI STREQUAL "openmpi")
    find_program(HERD_MPICC NAMES mpicc.openmpi)
  else()
    find_program(HERD_MPICC NAMES mpicc.mpich)
  endif()
  if(NOT HERD_MPICC)
    message(FATAL_ERROR "herd: HERD_MPI=${HERD_MPI} but its compiler wrapper (mpicc.${HERD_MPI}) "
                        "was not found; install it (Debian: libopenmpi-dev or libmpich-dev) or "
                        "pass -DMPI_C_COMPILER=/path/to/mpicc")
  endif()
  set(MPI_C_COMPILER "${HERD_MPICC}" CACHE FILEPATH "MPI C compiler wrapper" FORCE)
  find_package(MPI REQUIRED COMPONENTS C)
elseif(HERD_MPI STREQUAL "ON")
  find_package(MPI REQUIRED COMPONENTS C)
elseif(HERD_MPI STREQUAL "AUTO")
  find_package(MPI COMPONENTS C)
elseif(NOT HERD_MPI STREQUAL "OFF")
  message(FATAL_ERROR "herd: HERD_MPI=${HERD_MPI}; expected AUTO, ON, OFF, openmpi or mpich")
endif()

if(MPI_C_FOUND AND NOT HERD_MPI STREQUAL "OFF")
  set(HERD_WITH_MPI ON)
  # The family from the library itself (libmpi: Open MPI, libmpich: MPICH).
  set(HERD_MPI_FAMILY other)
  foreach(lib ${MPI_C_LIBRARIES})
    get_filename_component(libname ${lib} NAME)
    if(libname MATCHES "^libmpich")
      set(HERD_MPI_FAMILY mpich)
    elseif(libname MATCHES "^libmpi\\.")
      set(HERD_MPI_FAMILY openmpi)
    endif()
  endforeach()
  if(HERD_MPI MATCHES "^(openmpi|mpich)$" AND NOT HERD_MPI STREQUAL HERD_MPI_FAMILY)
    message(FATAL_ERROR "herd: HERD_MPI=${HERD_MPI} but ${HERD_MPICC} links ${MPI_C_LIBRARIES}")
  endif()
  set(openmpi_preflags --oversubscribe --bind-to none)
  if(HERD_MPI_FAMILY STREQUAL "openmpi")
    find_program(HERD_MPIEXEC_FOUND NAMES mpirun.openmpi orterun NAMES_PER_DIR)
    set(HERD_MPIEXEC_PREFLAGS ${openmpi_preflags})
    find_program(HERD_OTHER_MPIEXEC_FOUND NAMES mpiexec.hydra mpiexec.mpich NAMES_PER_DIR)
  elseif(HERD_MPI_FAMILY STREQUAL "mpich")
    find_program(HERD_MPIEXEC_FOUND NAMES mpiexec.hydra mpiexec.mpich NAMES_PER_DIR)
    find_program(HERD_OTHER_MPIEXEC_FOUND NAMES mpirun.openmpi NAMES_PER_DIR)
    set(HERD_OTHER_MPIEXEC_PREFLAGS ${openmpi_preflags})
  endif()
  if(HERD_OTHER_MPIEXEC_FOUND)
    set(HERD_OTHER_MPIEXEC "${HERD_OTHER_MPIEXEC_FOUND}")
  endif()
  if(HERD_MPIEXEC_FOUND)
    set(HERD_MPIEXEC "${HERD_MPIEXEC_FOUND}")
  else()
    set(HERD_MPIEXEC "${MPIEXEC_EXECUTABLE}") # FindMPI's guess
  endif()
  foreach(lib ${MPI_C_LIBRARIES})
    get_filename_component(dir ${lib} DIRECTORY)
    get_filename_component(libname ${lib} NAME_WE)
    string(REGEX REPLACE "^lib" "" libname "${libname}")
    string(APPEND HERD_PC_MPI_LIBS " -L${dir} -l${libname}")
  endforeach()
  message(STATUS "herd: MPI data parallelism (${HERD_MPI_FAMILY}, MPI ${MPI_C_VERSION}, launcher ${HERD_MPIEXEC})")
else()
  message(STATUS "herd: built without MPI (single process only)")
endif()
