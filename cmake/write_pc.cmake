# Runs at install time (cmake --install), when CMAKE_INSTALL_PREFIX is the prefix installed to
# (--prefix included): writes mlxrt.pc for that prefix and installs it. The caller sets
# PC_TEMPLATE, PC_OUT, PC_VERSION, PC_LIBDIR_REL, PC_INCLUDEDIR_REL, PC_REQUIRES_PRIVATE,
# PC_LIBS_PRIVATE, PC_LIBS_SANITIZE and PC_SYSTEM_LIBDIRS (the dirs the compiler and the loader
# search by default).
set(PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${PC_${kind}_REL}")
    set(PC_${kind} "${PC_${kind}_REL}")
    set(full_${kind} "${PC_${kind}_REL}")
  else()
    set(PC_${kind} "\${prefix}/${PC_${kind}_REL}")
    set(full_${kind} "${CMAKE_INSTALL_PREFIX}/${PC_${kind}_REL}")
  endif()
endforeach()
# A program linked with these flags alone must find libmlxrt.so.MAJOR when it runs: outside the
# system's library folders the library's folder goes into the program's run path.
set(PC_LIBS_EXTRA "")
get_filename_component(full_LIBDIR "${full_LIBDIR}" REALPATH)
set(system_lib 0)
foreach(d ${PC_SYSTEM_LIBDIRS})
  get_filename_component(d "${d}" REALPATH)
  if(d STREQUAL full_LIBDIR)
    set(system_lib 1)
  endif()
endforeach()
if(NOT system_lib)
  string(APPEND PC_LIBS_EXTRA " -Wl,-rpath,\${libdir}")
endif()
# A sanitized library needs its runtime in the program.
if(PC_LIBS_SANITIZE)
  string(APPEND PC_LIBS_EXTRA " ${PC_LIBS_SANITIZE}")
endif()
configure_file("${PC_TEMPLATE}" "${PC_OUT}" @ONLY)
if(IS_ABSOLUTE "${PC_LIBDIR_REL}")
  set(dest "${PC_LIBDIR_REL}/pkgconfig")
else()
  set(dest "${CMAKE_INSTALL_PREFIX}/${PC_LIBDIR_REL}/pkgconfig")
endif()
file(INSTALL DESTINATION "${dest}" TYPE FILE FILES "${PC_OUT}")
