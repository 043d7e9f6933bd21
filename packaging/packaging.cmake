# CPack: the Debian packages perch_<version>_amd64.deb and, with the trainer,
# perch-trainer_<version>_amd64.deb.
# Included from packaging/CMakeLists.txt after the install rules.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME perch)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Release binaries carry debug information (RelWithDebInfo); the packages hold them stripped
# (CPACK_DEBIAN_DEBUGINFO_PACKAGE would keep it in -dbgsym packages).
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL perch)
if(PERCH_BUILD_TRAINER)
  list(APPEND CPACK_COMPONENTS_ALL trainer)
endif()

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${PERCH_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends: the shared libraries the binaries link (dpkg-shlibdeps), plus what runs beside them.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Maintainer scripts keep 0755 and files 0644 whatever the checkout's modes.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

set(CPACK_DEBIAN_PERCH_PACKAGE_NAME perch)
set(CPACK_DEBIAN_PERCH_PACKAGE_SECTION utils)
# fuse3: /bin/fusermount3 (the unit's ExecStopPost, unmounting by hand). ca-certificates: the
# federations' servers speak https.
set(CPACK_DEBIAN_PERCH_PACKAGE_DEPENDS "fuse3, ca-certificates")
# CPack indents the lines after the synopsis and turns empty lines into " .".
set(perch_transfer_text "")
if(TARGET perch-transfer)
  set(perch_transfer_text "\nperch-transfer (in /usr/libexec/perch) is an HTCondor file-transfer
plugin for osdf://, pelican:// and stash:// URLs that reads through perchd.\n")
endif()
set(CPACK_DEBIAN_PERCH_DESCRIPTION
"per-node caching FUSE mount for Pelican/OSDF data federations
perchd mounts a federation namespace (osdf:///, pelican://host/path)
read-only through FUSE and keeps what jobs read in a persistent block cache
on local disk, so that a byte crosses the WAN once per node, not once per
job. It fetches from the caches the federation's director names, with
failover and resume, and prefetches what is about to be read. perchctl
looks at and steers the cache (stats, warm, pin, evict, hints).
${perch_transfer_text}
perchd.service mounts what /etc/perch/perchd.toml names (by default the
whole OSDF at /osdf). It is installed, not enabled: after checking the
configuration, systemctl enable --now perchd.")
set(CPACK_DEBIAN_PERCH_PACKAGE_CONTROL_EXTRA ${PERCH_DEB_DIR}/conffiles ${PERCH_DEB_DIR}/postinst
  ${PERCH_DEB_DIR}/prerm ${PERCH_DEB_DIR}/postrm)

set(CPACK_DEBIAN_TRAINER_PACKAGE_NAME perch-trainer)
set(CPACK_DEBIAN_TRAINER_PACKAGE_SECTION science)
set(CPACK_DEBIAN_TRAINER_PACKAGE_SUGGESTS perch)
set(CPACK_DEBIAN_TRAINER_DESCRIPTION
"ResNet trainer (libtorch) that reads a perch mount like any directory
perch-train trains ResNet-18/50 on an ImageFolder tree with its own JPEG
loader. Checkpoints make preemption harmless: exit 85 means checkpointed,
run again to continue. On a perch mount it hands perchd each epoch's read
order (perchctl hint) so that perchd fetches ahead of the loader.

perch-synth-imagenet writes an ImageNet-like tree of real JPEGs.")

include(CPack)
