# What `cmake --install` puts where (included from the top-level CMakeLists.txt
# after every target exists). Layout under the prefix:
#   bin/                      kvserver, kvcli, kvbench, kvproxy (their own install() rules)
#   lib/                      libkvclient.so.0 (SONAME from client/CMakeLists.txt), libkvclient.a
#   include/                  kvclient.h, kvclient_errors.h
#   lib/pkgconfig/            kvclient.pc
#   lib/cmake/kvclient/       kvclientConfig.cmake, kvclientConfigVersion.cmake, kvclientTargets*.cmake
#   share/man/man1/           kvserver.1.gz, kvcli.1.gz, kvbench.1.gz, kvproxy.1.gz
#   lib/systemd/system/       kvserver.service, kvproxy.service
#   share/doc/kvcache/        README.md, docs/*.md, kvserver.service (a copy to adapt), kvserver.conf.example
# The library directory is plain "lib" (not Debian's multiarch one) because
# kvclient.pc finds its prefix from its own location (${pcfiledir}/../..).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KV_CMAKE_DIR lib/cmake/kvclient)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvclientConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvclientConfig.cmake INSTALL_DESTINATION ${KV_CMAKE_DIR})
# 0.x: a minor release may change the ABI (the SONAME is the major number, so
# only a same-minor version is compatible while the major is 0).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvclientConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvclientConfig.cmake ${PROJECT_BINARY_DIR}/kvclientConfigVersion.cmake
  DESTINATION ${KV_CMAKE_DIR})

# Manual pages, compressed as Debian ships them (gzip -n: reproducible).
find_program(KV_GZIP gzip REQUIRED)
set(kv_man_gz)
foreach(page kvserver kvcli kvbench kvproxy)
  set(src ${PROJECT_SOURCE_DIR}/docs/man/${page}.1)
  set(gz ${PROJECT_BINARY_DIR}/man/${page}.1.gz)
  add_custom_command(OUTPUT ${gz}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
    COMMAND ${KV_GZIP} -9nc ${src} > ${gz}
    DEPENDS ${src} VERBATIM)
  list(APPEND kv_man_gz ${gz})
endforeach()
add_custom_target(kv_man ALL DEPENDS ${kv_man_gz})
install(FILES ${kv_man_gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# The service. The unit goes where systemd looks for packaged units (under
# /usr with a /usr prefix; /usr/local/lib/systemd/system is searched too).
install(FILES ${PROJECT_SOURCE_DIR}/deploy/kvserver.service ${PROJECT_SOURCE_DIR}/deploy/kvproxy.service
  DESTINATION lib/systemd/system)
set(kv_docs ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/deploy/kvserver.service)
# The example configuration comes with kvserver --config; ship it when present.
if(EXISTS ${PROJECT_SOURCE_DIR}/deploy/kvserver.conf.example)
  list(APPEND kv_docs ${PROJECT_SOURCE_DIR}/deploy/kvserver.conf.example)
endif()
install(FILES ${kv_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR})
# README's links point into docs/: the pages go with it, same relative paths.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md" PATTERN "man" EXCLUDE)
