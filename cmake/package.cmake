# cpack -G DEB: one package, kvcache, holding everything `cmake --install`
# installs (cmake/install.cmake) under /usr. Build it from a plain
# (non-sanitizer) tree:  cd build && cpack -G DEB  ->  kvcache_VERSION_ARCH.deb
# tests/package/run builds it and installs it into a clean Debian 12 root.
set(CPACK_PACKAGE_NAME kvcache)
set(CPACK_PACKAGE_VENDOR "kvcache")
set(CPACK_PACKAGE_CONTACT "kvcache maintainers <kvcache@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "remote key-value cache over one-sided RDMA")
set(CPACK_PACKAGE_INSTALL_DIRECTORY kvcache)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # kvcache_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The control file's first line is the summary above; this is the body
# (CPack indents it and writes the empty line as " .").
set(CPACK_PACKAGE_DESCRIPTION "kvserver owns one registered memory region; clients (libkvclient) serve
GET, PUT and DELETE themselves with one-sided RDMA READ, WRITE and atomics,
so the server's CPU is only on the control path.

This package holds kvserver (with a systemd unit), kvproxy (memcached's text
and meta protocols in front of the tier, with a systemd unit), the kvcli
command-line client, the kvbench benchmark, and libkvclient (shared and static library,
headers, pkg-config file and CMake package).")
# The runtime libraries come from what the binaries actually link
# (dpkg-shlibdeps: libibverbs1, librdmacm1, libjemalloc2, libxxhash0, libssl3,
# libmemcached11, libc6). libkvclient.so.0 is in the package itself:
# dpkg-shlibdeps is told where to find it, and the package gets a shlibs file
# so that other packages can depend on it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/client)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# (GENERATE_SHLIBS also adds the postinst/postrm that run ldconfig.)
# libibverbs finds devices through provider plugins (rxe, mlx5, ...), which
# libibverbs1 only recommends; without them kvserver sees no device. rdma-core
# (udev rules, module loading) pulls in udev: suggested only.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ibverbs-providers")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "rdma-core, ibverbs-utils")
set(CPACK_STRIP_FILES ON)

include(CPack)
