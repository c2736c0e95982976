# cmake/install.cmake: what `cmake --install` puts where, and the Debian package (cpack -G DEB).
# Included at the end of the top-level CMakeLists.txt, after the sluiced (and sluicectl) targets:
#   include(cmake/install.cmake)
#
# Layout (CMAKE_INSTALL_PREFIX=/usr, as for the package):
#   /usr/bin/sluiced, /usr/bin/sluicectl
#   /usr/lib/systemd/system/sluiced.service, sluiced@.service   (SLUICE_SYSTEMD_UNITDIR)
#   /usr/lib/sysusers.d/sluice.conf, /usr/lib/tmpfiles.d/sluice.conf
#   /etc/sluice/sluice.yaml                                      (CMAKE_INSTALL_FULL_SYSCONFDIR/sluice)
#   /usr/share/sluice/config/pipelines/*.yaml (run as installed), /usr/share/sluice/config/examples/*.yaml (need
#   the user's videos or model), /usr/share/sluice/models/ (the shipped models and labels), /usr/share/sluice/media/
#   (the clip detect.yaml reads), /usr/share/doc/sluice/README.md (pipelines name models relative to themselves:
#   ../../models/)
#
# The units name absolute paths (ExecStart= binary, --config file), fixed when CMake configures:
# install with the prefix you configured. For a staged install use DESTDIR, not --prefix:
#   DESTDIR=/tmp/stage cmake --install build/release
# The package installs what was configured: build it from a tree configured with -DCMAKE_INSTALL_PREFIX=/usr.
include_guard(GLOBAL)
include(GNUInstallDirs)

get_filename_component(_sluice_src "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# Relative paths are taken under CMAKE_INSTALL_PREFIX (default: PREFIX/lib/systemd/system). Not
# CMAKE_INSTALL_LIBDIR: systemd looks in lib/systemd/system, never lib/x86_64-linux-gnu/systemd.
set(SLUICE_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit files are installed (relative: under CMAKE_INSTALL_PREFIX)")
set(SLUICE_SYSUSERSDIR "lib/sysusers.d" CACHE STRING "Where the sysusers.d file is installed")
set(SLUICE_TMPFILESDIR "lib/tmpfiles.d" CACHE STRING "Where the tmpfiles.d file is installed")
set(SLUICE_CONFDIR "${CMAKE_INSTALL_FULL_SYSCONFDIR}/sluice")
# Install destination of the config: /etc/sluice (absolute) when the prefix is /usr; PREFIX/etc/sluice
# relative to the prefix otherwise, so that a --prefix install does not write outside its prefix.
if(CMAKE_INSTALL_FULL_SYSCONFDIR STREQUAL "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}")
  set(_sluice_confdest "${CMAKE_INSTALL_SYSCONFDIR}/sluice")
else()
  set(_sluice_confdest "${SLUICE_CONFDIR}")
endif()

# --- executables -------------------------------------------------------------------------------
install(TARGETS sluiced RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET sluicectl)
  install(TARGETS sluicectl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# --- systemd units, generated with the installed paths ------------------------------------------
# systemd/NAME.in -> BUILD/systemd/NAME (tests/systemd_verify.sh checks these).
set(_sluice_units sluiced.service sluiced@.service)
foreach(_unit IN LISTS _sluice_units)
  configure_file("${_sluice_src}/systemd/${_unit}.in" "${CMAKE_BINARY_DIR}/systemd/${_unit}" @ONLY)
  install(FILES "${CMAKE_BINARY_DIR}/systemd/${_unit}" DESTINATION ${SLUICE_SYSTEMD_UNITDIR})
endforeach()
install(FILES "${_sluice_src}/systemd/sluice.sysusers" DESTINATION ${SLUICE_SYSUSERSDIR} RENAME sluice.conf)
install(FILES "${_sluice_src}/systemd/sluice.tmpfiles" DESTINATION ${SLUICE_TMPFILESDIR} RENAME sluice.conf)

# --- configuration, pipelines, documentation ----------------------------------------------------
# With prefix /usr: /etc/sluice, where DESTDIR applies but --prefix does not.
install(FILES "${_sluice_src}/config/sluice.yaml" DESTINATION ${_sluice_confdest})
# The shipped pipelines that run as installed, in /usr/share/sluice/config/pipelines: everything they name (models,
# the clip) is installed with them, and each passes `sluiced check` in a fresh root (tests/package/deb_test.sh).
set(SLUICE_INSTALLED_PIPELINES default detect cameras camera-leaky multi-gpu tee throughput-1080p)
foreach(_p IN LISTS SLUICE_INSTALLED_PIPELINES)
  if(NOT _p STREQUAL "detect")  # installed from the copy made below
    install(FILES "${_sluice_src}/config/pipelines/${_p}.yaml" DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice/config/pipelines)
  endif()
endforeach()
# Examples that need something only the user has, in /usr/share/sluice/config/examples (their model paths,
# ../../models/, resolve there as in the source tree): directory-job (a folder of videos, /srv/video/incoming, and
# one for the results), detect-yolov8 (a YOLO model exported to /usr/share/sluice/models/yolov8n.onnx); the top of
# each file says so. Not installed: the bench-*.yaml pipelines (device: cuda, GPU measurements that belong with
# bench/ in the source tree; resnet50 and yolov8s also need models that bench/ scripts write).
install(FILES "${_sluice_src}/config/pipelines/directory-job.yaml" "${_sluice_src}/config/pipelines/detect-yolov8.yaml"
        DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice/config/examples)
# detect.yaml names its clip relative to the repository root (where sluiced runs from a checkout); the installed
# copy names the installed clip instead.
set(_sluice_datadir_full "${CMAKE_INSTALL_FULL_DATADIR}/sluice")
file(READ "${_sluice_src}/config/pipelines/detect.yaml" _sluice_detect)
foreach(_pair IN ITEMS
    "uri: [config/media/shapes.mp4]   # relative to where sluiced runs (the repository root)|uri: [${_sluice_datadir_full}/media/shapes.mp4]   # installed with the package"
    "#   build/release/sluiced run config/pipelines/detect.yaml     # from the repository root|#   sluiced run ${_sluice_datadir_full}/config/pipelines/detect.yaml   # from a folder you may write to")
  string(REPLACE "|" ";" _pair "${_pair}")
  list(GET _pair 0 _from)
  list(GET _pair 1 _to)
  string(FIND "${_sluice_detect}" "${_from}" _at)
  if(_at LESS 0)
    message(FATAL_ERROR "cmake/install.cmake: config/pipelines/detect.yaml no longer has the line '${_from}': "
                        "update how its installed copy is made")
  endif()
  string(REPLACE "${_from}" "${_to}" _sluice_detect "${_sluice_detect}")
endforeach()
file(WRITE "${CMAKE_BINARY_DIR}/installed-pipelines/detect.yaml" "${_sluice_detect}")
install(FILES "${CMAKE_BINARY_DIR}/installed-pipelines/detect.yaml" DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice/config/pipelines)
install(FILES "${_sluice_src}/config/media/shapes.mp4" DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice/media)
install(FILES "${_sluice_src}/models/testsrc-classifier.onnx" "${_sluice_src}/models/testsrc-classifier.labels"
              "${_sluice_src}/models/shapes-detector.onnx" "${_sluice_src}/models/shapes-detector.labels"
              "${_sluice_src}/models/README.md" DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice/models)
install(FILES "${_sluice_src}/README.md" DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/sluice)
install(DIRECTORY "${_sluice_src}/docs/" DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/sluice/docs)

# `cmake --install --prefix OTHER` would put the binary where the units do not look for it.
install(CODE "
  if(NOT \"\${CMAKE_INSTALL_PREFIX}\" STREQUAL \"${CMAKE_INSTALL_PREFIX}\")
    message(WARNING \"sluice: installing under \${CMAKE_INSTALL_PREFIX}, but the systemd units run \"
      \"${CMAKE_INSTALL_FULL_BINDIR}/sluiced with ${SLUICE_CONFDIR}/sluice.yaml (configured prefix \"
      \"${CMAKE_INSTALL_PREFIX}). Configure with -DCMAKE_INSTALL_PREFIX=\${CMAKE_INSTALL_PREFIX}, \"
      \"or stage with DESTDIR=... instead of --prefix.\")
  endif()")

# --- Debian package -----------------------------------------------------------------------------
set(_sluice_deb "${CMAKE_BINARY_DIR}/debian")
file(MAKE_DIRECTORY "${_sluice_deb}")

# Maintainer scripts: safe in a chroot or container without a running systemd (every systemd call
# tolerates failure; daemon-reload and restarts only where systemd is PID 1).
file(WRITE "${_sluice_deb}/postinst" [=[#!/bin/sh
# sluice postinst: the sluice user and group, /run/sluice and /var/lib/sluice, then tell systemd.
set -e
if [ "$1" = configure ]; then
    systemd-sysusers sluice.conf || true
    systemd-tmpfiles --create sluice.conf || true
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
        # Upgrade: move running daemons onto the new binary (they drain on SIGTERM first).
        if [ -n "$2" ]; then
            systemctl try-restart sluiced.service 'sluiced@*.service' || true
        fi
    fi
fi
exit 0
]=])
file(WRITE "${_sluice_deb}/prerm" [=[#!/bin/sh
# sluice prerm: on removal stop the daemons (they drain first) and disable the main unit.
set -e
if [ "$1" = remove ]; then
    if [ -d /run/systemd/system ]; then
        systemctl stop sluiced.service 'sluiced@*.service' || true
    fi
    systemctl --no-reload disable sluiced.service >/dev/null 2>&1 || true
fi
exit 0
]=])
file(WRITE "${_sluice_deb}/postrm" [=[#!/bin/sh
# sluice postrm: forget the removed unit files.
set -e
if [ "$1" = remove ] || [ "$1" = purge ]; then
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
fi
exit 0
]=])
# An upgrade keeps the administrator's edits to the config (dpkg asks instead of overwriting).
file(WRITE "${_sluice_deb}/conffiles" "${SLUICE_CONFDIR}/sluice.yaml\n")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "sluice developers")
set(CPACK_PACKAGE_CONTACT "sluice developers")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "sluice developers")
set(CPACK_DEBIAN_PACKAGE_SECTION video)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Depends are computed from what the binaries link (dpkg-shlibdeps, from dpkg-dev), so they are complete.
# systemd is recommended, not required: the units need it, `sluiced run` does not.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
set(_sluice_description "sluiced reads frames from cameras, streams and files, runs them through a
YAML-defined chain of stages (decode, preprocess, ONNX inference, sinks) and
reports over a control socket (sluicectl) and Prometheus metrics. It runs as
the systemd service sluiced.service, or sluiced@NAME.service for one pipeline
per config or GPU.")
if(SLUICE_WITH_CUDA)
  # The GPU build links NVIDIA's CUDA runtime, cuBLAS (and cuBLASLt) and cuDNN. Debian's archive does not have the
  # versions it was built with, so dpkg-shlibdeps cannot map them to packages (their folders are private to it);
  # the package instead names the packages of NVIDIA's CUDA repository that hold exactly those libraries:
  # cuda-cudart-X-Y (libcudart.so.X), libcublas-X-Y (libcublas.so.X, libcublasLt.so.X), libcudnnN-cuda-X
  # (libcudnn.so.N). With NVIDIA's repository in apt's sources, `apt install ./sluice-cuda_*.deb` pulls them in;
  # the driver (libcuda, libnvcuvid: loaded at run time) is only suggested, and without a GPU or driver the same
  # binary runs every pipeline with `device: auto` on the CPU. It replaces the CPU package.
  set(CPACK_PACKAGE_NAME sluice-cuda)
  set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU video pipeline daemon (CUDA build)")
  set(CPACK_DEBIAN_PACKAGE_PROVIDES sluice)
  set(CPACK_DEBIAN_PACKAGE_CONFLICTS sluice)
  set(CPACK_DEBIAN_PACKAGE_REPLACES sluice)
  get_filename_component(_sluice_cuda_libdir "${CUDAToolkit_LIBRARY_DIR}" REALPATH)
  get_filename_component(_sluice_cudnn_dir "${CUDNN_LIBRARY}" DIRECTORY)
  get_filename_component(_sluice_cudnn_realdir "${_sluice_cudnn_dir}" REALPATH)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
      "${CUDAToolkit_LIBRARY_DIR};${_sluice_cuda_libdir};${_sluice_cudnn_dir};${_sluice_cudnn_realdir}")
  # cuDNN's major version (the soname libcudnn.so.N) from the header it was built against.
  find_file(_sluice_cudnn_version_h cudnn_version.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} "${_sluice_cudnn_dir}/../include" NO_CACHE REQUIRED)
  file(STRINGS "${_sluice_cudnn_version_h}" _sluice_cudnn_major REGEX "^#define CUDNN_MAJOR [0-9]+")
  string(REGEX REPLACE "^#define CUDNN_MAJOR ([0-9]+).*" "\\1" _sluice_cudnn_major "${_sluice_cudnn_major}")
  set(_sluice_cuda_xy "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  set(SLUICE_CUDA_DEB_DEPENDS
      "cuda-cudart-${_sluice_cuda_xy}, libcublas-${_sluice_cuda_xy}, libcudnn${_sluice_cudnn_major}-cuda-${CUDAToolkit_VERSION_MAJOR}")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "${SLUICE_CUDA_DEB_DEPENDS}")  # dpkg-shlibdeps' list is appended
  # nvJPEG (GPU JPEG decoding) is dlopen()ed when present: recommended, from the same repository.
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd, libnvjpeg-${_sluice_cuda_xy}")
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "cuda-drivers | nvidia-driver | nvidia-open")
  set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${_sluice_description}
.
This build runs the stages on NVIDIA GPUs, with CUDA ${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}, cuBLAS and cuDNN ${_sluice_cudnn_major}
from NVIDIA's CUDA repository (add it to apt's sources first) and the NVIDIA
driver. Without a GPU or driver every pipeline with device auto runs on the CPU.
The package 'sluice' is the build without CUDA, for machines without NVIDIA's
repository.")
else()
  set(CPACK_PACKAGE_NAME sluice)
  set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "video pipeline daemon")
  set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${_sluice_description}
.
This build runs every stage on the CPU and needs no NVIDIA software; the
package 'sluice-cuda' is the build for NVIDIA GPUs.")
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${_sluice_deb}/postinst;${_sluice_deb}/prerm;${_sluice_deb}/postrm;${_sluice_deb}/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)  # scripts 0755, conffiles 0644
# The package holds exactly the configured paths (see the top of this file).
set(CPACK_PACKAGING_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")
file(WRITE "${_sluice_deb}/cpack-project-config.cmake" "
if(CPACK_GENERATOR STREQUAL \"DEB\" AND NOT CPACK_PACKAGING_INSTALL_PREFIX STREQUAL \"/usr\")
  message(WARNING \"sluice: this package installs under \${CPACK_PACKAGING_INSTALL_PREFIX}; a Debian package \"
    \"belongs in /usr: configure with -DCMAKE_INSTALL_PREFIX=/usr\")
endif()
")
set(CPACK_PROJECT_CONFIG_FILE "${_sluice_deb}/cpack-project-config.cmake")
include(CPack)
