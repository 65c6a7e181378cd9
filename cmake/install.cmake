# `cmake --install build [--prefix P]` (GNUInstallDirs; the default prefix is /usr/local):
#   bin/mlxrt                     the command line (links the static library: it uses internals)
#   lib/libmlxrt.so.MAJOR.MINOR.PATCH, lib/libmlxrt.so.MAJOR (the SONAME), lib/libmlxrt.so
#   lib/libmlxrt-cuda.so          the CUDA plug-in, when built: beside libmlxrt.so, where
#                                 src/accel/accel.c looks (and bin/../lib for bin/mlxrt)
#   include/mlxrt.h
#   lib/pkgconfig/mlxrt.pc        written at install time for the prefix installed to
# Nothing installed names the build folder.
install(TARGETS mlxrt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS mlxrt_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/mlxrt.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET mlxrt_cuda)
  # (cuBLAS, linked dynamically, comes from the loader's search path, as in the build tree)
  install(TARGETS mlxrt_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

# mlxrt.pc: libcjson through its own .pc when pkg-config knows it, else by name.
find_package(PkgConfig QUIET)
set(pc_requires "")
set(pc_private "")
if(PKG_CONFIG_FOUND)
  pkg_check_modules(MLXRT_PC_CJSON QUIET libcjson)
endif()
if(MLXRT_PC_CJSON_FOUND)
  set(pc_requires "libcjson")
else()
  set(pc_private "-lcjson ")
endif()
string(APPEND pc_private "-pthread -lm")
foreach(l ${CMAKE_DL_LIBS})
  string(APPEND pc_private " -l${l}")
endforeach()
set(pc_sanitize "")
if(MLXRT_SANITIZE)
  set(pc_sanitize "-fsanitize=address,undefined")
endif()
set(pc_system_dirs ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES} ${CMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES})
install(CODE "
  set(PC_TEMPLATE \"${CMAKE_CURRENT_LIST_DIR}/mlxrt.pc.in\")
  set(PC_OUT \"${CMAKE_BINARY_DIR}/pkgconfig/mlxrt.pc\")
  set(PC_VERSION \"${PROJECT_VERSION}\")
  set(PC_LIBDIR_REL \"${CMAKE_INSTALL_LIBDIR}\")
  set(PC_INCLUDEDIR_REL \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(PC_REQUIRES_PRIVATE \"${pc_requires}\")
  set(PC_LIBS_PRIVATE \"${pc_private}\")
  set(PC_LIBS_SANITIZE \"${pc_sanitize}\")
  set(PC_SYSTEM_LIBDIRS \"${pc_system_dirs}\")
  include(\"${CMAKE_CURRENT_LIST_DIR}/write_pc.cmake\")
")
