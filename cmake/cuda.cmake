# CUDA backend detection. HERD_CUDA=AUTO builds it when nvcc, the CUDA toolkit and
# cuDNN are found; ON makes a missing piece an error; OFF (or nothing found) builds
# exactly the CPU-only library. HERD_NCCL=AUTO links NCCL for multi-GPU gradient
# reductions when it is found (and MPI, which bootstraps it, is built in); ON makes
# it required; OFF reduces GPU gradients with MPI through host memory.
set(HERD_WITH_CUDA OFF)
set(HERD_WITH_CUDNN OFF)
set(HERD_WITH_NCCL OFF)
set(HERD_CUDA_LIBS "")

function(herd_cuda_missing what)
  if(HERD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "herd: HERD_CUDA=ON but ${what}; install it or configure with -DHERD_CUDA=OFF")
  endif()
  message(STATUS "herd: built without CUDA (${what})")
endfunction()

if(HERD_CUDA STREQUAL "OFF")
  message(STATUS "herd: built without CUDA (HERD_CUDA=OFF)")
else()
  # nvcc is rarely on PATH; the toolkit's usual home is a good default.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    herd_cuda_missing("no CUDA compiler (nvcc) was found")
  else()
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND)
      herd_cuda_missing("the CUDA toolkit libraries were not found")
    else()
      set(_herd_cuda_roots ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR} $ENV{CUDNN_ROOT})
      find_path(HERD_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS ${_herd_cuda_roots}
                PATH_SUFFIXES include)
      find_library(HERD_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS ${_herd_cuda_roots}
                   PATH_SUFFIXES lib64 lib)
      find_path(HERD_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS ${_herd_cuda_roots}
                PATH_SUFFIXES include)
      find_library(HERD_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS ${_herd_cuda_roots}
                   PATH_SUFFIXES lib64 lib)
      if(NOT HERD_CUDNN_INCLUDE OR NOT HERD_CUDNN_LIB)
        # Convolutions need cuDNN: without it there is no useful GPU backend.
        herd_cuda_missing("cuDNN (cudnn.h, libcudnn) was not found under the toolkit or CUDNN_ROOT")
      else()
        set(HERD_WITH_CUDA ON)
        set(HERD_WITH_CUDNN ON)
        if(HERD_NCCL STREQUAL "OFF")
          message(STATUS "herd: NCCL off (HERD_NCCL=OFF): GPU gradients go through MPI and host memory")
        elseif(NOT HERD_NCCL_INCLUDE OR NOT HERD_NCCL_LIB OR NOT HERD_WITH_MPI)
          if(HERD_NCCL STREQUAL "ON")
            message(FATAL_ERROR "herd: HERD_NCCL=ON but NCCL (nccl.h, libnccl) or MPI (which "
                                "bootstraps it) was not found; install them or use -DHERD_NCCL=AUTO")
          endif()
          message(STATUS "herd: built without NCCL (needs nccl.h, libnccl and MPI)")
        else()
          set(HERD_WITH_NCCL ON)
        endif()
      endif()
    endif()
  endif()
endif()

if(HERD_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # H100 (sm_90) natively, A100 (sm_80) too; the sm_90 PTX covers newer GPUs.
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  # The shared runtime, as CUDA::cudart below: one runtime in the process, not a
  # static copy beside the shared one.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # Warnings as errors in device and host code alike; no fast math: the backend is
  # checked against the CPU one at fp32 tolerances.
  add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings;-Xcompiler=-Wall,-Wextra>")
  # cuBLAS is opened when the backend starts (src/core/cublas_lib.c), not linked.
  # Linked only: the toolkit's include directories go to the configured files alone
  # (cmake/config.cmake).
  set(HERD_CUDA_LIBS $<LINK_ONLY:CUDA::cudart> ${HERD_CUDNN_LIB} ${CMAKE_DL_LIBS})
  if(HERD_WITH_NCCL)
    list(APPEND HERD_CUDA_LIBS ${HERD_NCCL_LIB})
  endif()
  message(STATUS "herd: CUDA backend (CUDA ${CUDAToolkit_VERSION}, cuDNN ${HERD_CUDNN_LIB}, "
                 "NCCL ${HERD_WITH_NCCL}; architectures ${CMAKE_CUDA_ARCHITECTURES})")
endif()
