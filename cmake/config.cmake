# The build's configuration (MPI, CUDA, NCCL) reaches only the files that depend on it:
# generated/herd_config.h holds it, and only the files that include it (or a header that
# brings MPI's or CUDA's own: HERD_CONFIG_HEADERS) see MPI's and CUDA's include
# directories. Every other file compiles with the same command line in every
# configuration, so make test's MPICH and no-MPI builds take the optimised build's objects
# from ccache without preprocessing them (bench/results/2026-12-06-build-cost.txt).
# -Wundef (CMakeLists.txt) stops a file that tests HERD_HAVE_* without the header.
foreach(flag MPI CUDA NCCL)
  if(HERD_WITH_${flag})
    set(HERD_HAVE_${flag} 1)
  else()
    set(HERD_HAVE_${flag} 0)
  endif()
endforeach()
configure_file(${CMAKE_SOURCE_DIR}/cmake/herd_config.h.in ${HERD_GEN_DIR}/herd_config.h @ONLY)

set(HERD_CONFIG_HEADERS herd_config.h dist/comm_mpi_internal.h backend/cuda/cuda.h core/cublas_lib.h)
set(HERD_CONFIG_INCLUDES "")
set(HERD_CONFIG_OPTIONS "")
if(HERD_WITH_MPI)
  get_target_property(dirs MPI::MPI_C INTERFACE_INCLUDE_DIRECTORIES)
  list(APPEND HERD_CONFIG_INCLUDES ${dirs})
  # What some MPIs' wrappers add besides (-pthread, definitions); none for Debian's.
  get_target_property(opts MPI::MPI_C INTERFACE_COMPILE_OPTIONS)
  get_target_property(defs MPI::MPI_C INTERFACE_COMPILE_DEFINITIONS)
  if(opts)
    list(APPEND HERD_CONFIG_OPTIONS ${opts})
  endif()
  foreach(def ${defs})
    list(APPEND HERD_CONFIG_OPTIONS -D${def})
  endforeach()
endif()
if(HERD_WITH_CUDA)
  list(APPEND HERD_CONFIG_INCLUDES ${CUDAToolkit_INCLUDE_DIRS} ${HERD_CUDNN_INCLUDE})
  if(HERD_WITH_NCCL)
    list(APPEND HERD_CONFIG_INCLUDES ${HERD_NCCL_INCLUDE})
  endif()
endif()
list(REMOVE_DUPLICATES HERD_CONFIG_INCLUDES)
foreach(dir ${HERD_CONFIG_INCLUDES})
  list(APPEND HERD_CONFIG_OPTIONS -isystem ${dir})
endforeach()
string(REPLACE "." "\\." HERD_CONFIG_REGEX "${HERD_CONFIG_HEADERS}")
string(REPLACE ";" "|" HERD_CONFIG_REGEX "${HERD_CONFIG_REGEX}")
set(HERD_CONFIG_REGEX "#include \"(${HERD_CONFIG_REGEX})\"")

# herd_configured_sources(FILE...): gives those of the files (C or CUDA sources, in the
# calling directory) that include a configuration header MPI's and CUDA's include
# directories; the CUDA backend's own files (and the unit of its kernels) always.
function(herd_configured_sources)
  foreach(src ${ARGN})
    if(src MATCHES "/src/backend/cuda/|\\.cu$")
      set(hit 1)
    else()
      file(STRINGS ${src} hit REGEX "${HERD_CONFIG_REGEX}" LIMIT_COUNT 1)
    endif()
    if(hit AND HERD_CONFIG_OPTIONS)
      set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS ${HERD_CONFIG_OPTIONS})
    endif()
  endforeach()
endfunction()
