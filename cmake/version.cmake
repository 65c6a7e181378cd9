# The version is defined once, in include/mlxrt.h (MLXRT_VERSION_MAJOR/MINOR/PATCH and the
# matching MLXRT_VERSION string): the project's version, the shared library's VERSION and
# SOVERSION and mlxrt.pc are read from there. Included before project().
set(_mlxrt_header "${CMAKE_CURRENT_LIST_DIR}/../include/mlxrt.h")
file(STRINGS "${_mlxrt_header}" _mlxrt_version_lines REGEX "^#define MLXRT_VERSION")
foreach(_part MAJOR MINOR PATCH)
  if(NOT _mlxrt_version_lines MATCHES "#define MLXRT_VERSION_${_part} +([0-9]+)")
    message(FATAL_ERROR "include/mlxrt.h: expected '#define MLXRT_VERSION_${_part} <number>'")
  endif()
  set(MLXRT_VERSION_${_part} ${CMAKE_MATCH_1})
endforeach()
set(MLXRT_VERSION "${MLXRT_VERSION_MAJOR}.${MLXRT_VERSION_MINOR}.${MLXRT_VERSION_PATCH}")
if(NOT _mlxrt_version_lines MATCHES "#define MLXRT_VERSION +\"${MLXRT_VERSION}\"")
  message(FATAL_ERROR "include/mlxrt.h: MLXRT_VERSION must be \"${MLXRT_VERSION}\", the string of "
                      "MLXRT_VERSION_MAJOR.MINOR.PATCH")
endif()

# The commit the build comes from, for `mlxrt --version`, read at configure time when git and a
# work tree are there (empty otherwise: the build never needs git). CMake configures again when
# HEAD moves, so the commit printed is the one built.
function(mlxrt_git_commit out)
  set(${out} "" PARENT_SCOPE)
  find_package(Git QUIET)
  if(NOT GIT_FOUND)
    return()
  endif()
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --show-toplevel --short=12 HEAD
                  WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE git_out
                  ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  # (a source tree copied into another repository's work tree is not that repository's commit)
  if(NOT rc EQUAL 0 OR NOT git_out MATCHES "^([^\n]*)\n([0-9a-f]+)$")
    return()
  endif()
  set(commit "${CMAKE_MATCH_2}")
  get_filename_component(top "${CMAKE_MATCH_1}" REALPATH)
  get_filename_component(src "${CMAKE_SOURCE_DIR}" REALPATH)
  if(NOT top STREQUAL src)
    return()
  endif()
  foreach(f HEAD logs/HEAD)
    execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --git-path ${f}
                    WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}" OUTPUT_VARIABLE p ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    get_filename_component(p "${p}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
    if(EXISTS "${p}")
      set_property(DIRECTORY "${CMAKE_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${p}")
    endif()
  endforeach()
  set(${out} "${commit}" PARENT_SCOPE)
endfunction()
