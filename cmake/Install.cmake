# Install.cmake: where `cmake --install` puts Tether (GNUInstallDirs), and
# the Debian package `make deb` builds from the same rules with CPack.
#
# With CMAKE_INSTALL_PREFIX=/usr (what the Makefile configures):
#   /usr/bin                     tether-gateway, tether-client, tetherctl
#   /usr/share/man/man{1,5,8}    the man pages (man/), gzip -9n
#   /etc/tether                  gateway.conf, client.conf (from config/*.conf.example)
#   /etc/tether/prometheus       tether.rules.yml, the alerting rules
#   /usr/lib/systemd/system      tether-gateway.service, tether-client.service
#   /usr/lib/sysusers.d          tether.conf: the users tether and tether-client
#   /var/lib/tether              the gateway's data dir (its unit's StateDirectory)
#   /var/lib/tether-client       the node's state dir (likewise)
#   /usr/share/doc/tether        interface.md, copyright, changelog
# docs/0013-packaging.md says why CPack and how the package is laid out.
include(GNUInstallDirs)

set(TETHER_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
  "systemd system units, relative to the prefix (or absolute)")
set(TETHER_DEB_MAINTAINER "Tether maintainers <tether@example.org>" CACHE STRING
  "Maintainer field of the Debian package")

install(TARGETS tether-gateway tether-client tetherctl
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# A stripped install (cpack, cmake --install --strip) also drops the
# compiler's .comment section, as Debian's dh_strip does.
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    foreach(p tether-gateway tether-client tetherctl)
      execute_process(COMMAND strip --remove-section=.comment --remove-section=.note
        \$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/\${p} COMMAND_ERROR_IS_FATAL ANY)
    endforeach()
  endif()")

# Man pages, compressed at build time (Debian wants gzip -9n: no name, no
# timestamp, so the package is reproducible).
set(tether_man_pages tetherctl.1 tether.conf.5 tether-client.8 tether-gateway.8)
set(tether_man_gz)
foreach(page ${tether_man_pages})
  string(REGEX REPLACE ".*\\.([0-9])$" "\\1" section ${page})
  set(gz ${CMAKE_BINARY_DIR}/man/${page}.gz)
  add_custom_command(OUTPUT ${gz}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND gzip -9nc ${CMAKE_SOURCE_DIR}/man/${page} > ${gz}
    DEPENDS ${CMAKE_SOURCE_DIR}/man/${page} VERBATIM)
  list(APPEND tether_man_gz ${gz})
  install(FILES ${gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()

# The Debian changelog, compressed the same way; copyright and the interface
# reference beside it.
set(deb_changelog_gz ${CMAKE_BINARY_DIR}/packaging/changelog.Debian.gz)
add_custom_command(OUTPUT ${deb_changelog_gz}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/packaging
  COMMAND gzip -9nc ${CMAKE_SOURCE_DIR}/packaging/deb/changelog > ${deb_changelog_gz}
  DEPENDS ${CMAKE_SOURCE_DIR}/packaging/deb/changelog VERBATIM)
add_custom_target(tether_install_files ALL DEPENDS ${tether_man_gz} ${deb_changelog_gz})
install(FILES ${deb_changelog_gz} ${CMAKE_SOURCE_DIR}/packaging/deb/copyright
  docs/interface.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES packaging/deb/lintian-overrides RENAME tether
  DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides)

# Configuration: the example files become the installed files (every key
# commented out with its default), conffiles in the package.
foreach(prog gateway client)
  if(EXISTS ${CMAKE_SOURCE_DIR}/config/${prog}.conf.example)
    install(FILES config/${prog}.conf.example RENAME ${prog}.conf
      DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/tether)
  endif()
endforeach()

# The Prometheus alerting rules (docs/operations.md, "Alerts"), a conffile
# too: an operator may tune the thresholds in place.
install(FILES config/prometheus/tether.rules.yml
  DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/tether/prometheus)

# systemd units and the services' users (sysusers.d), once config/systemd/
# has them; the port-443 drop-in is an example for the administrator.
foreach(unit tether-gateway.service tether-client.service)
  if(EXISTS ${CMAKE_SOURCE_DIR}/config/systemd/${unit})
    install(FILES config/systemd/${unit} DESTINATION ${TETHER_SYSTEMD_UNITDIR})
  endif()
endforeach()
if(EXISTS ${CMAKE_SOURCE_DIR}/config/systemd/tether.sysusers.conf)
  install(FILES config/systemd/tether.sysusers.conf RENAME tether.conf
    DESTINATION lib/sysusers.d)
endif()
if(EXISTS ${CMAKE_SOURCE_DIR}/config/systemd/tether-gateway-port443.conf)
  install(FILES config/systemd/tether-gateway-port443.conf
    DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
endif()

# State: the package's postinst gives these to the services' users (0700).
install(DIRECTORY DESTINATION ${CMAKE_INSTALL_FULL_LOCALSTATEDIR}/lib/tether)
install(DIRECTORY DESTINATION ${CMAKE_INSTALL_FULL_LOCALSTATEDIR}/lib/tether-client)

# --- the Debian package (make deb) ---
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tether)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT ${TETHER_DEB_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${TETHER_DEB_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "reverse-tunnel connectivity and registration gateway")
# CPack puts the summary first and indents these lines itself.
set(CPACK_PACKAGE_DESCRIPTION
"Nodes behind NAT or in airgapped networks run tether-client, which keeps
one authenticated WebSocket open to tether-gateway; operators reach the
nodes through that tunnel with tetherctl (ssh ProxyCommand, port
forwarding, kubectl through the gateway), only to the targets each node
allows.")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
# tether-client loads GSSAPI at run time, only for a Kerberos (Negotiate)
# proxy (common/gss.c, docs/0024): shlibdeps cannot see it.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libgssapi-krb5-2")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(deb_control_extra
  ${CMAKE_SOURCE_DIR}/packaging/deb/postinst
  ${CMAKE_SOURCE_DIR}/packaging/deb/prerm
  ${CMAKE_SOURCE_DIR}/packaging/deb/postrm)
# conffiles: every file installed under /etc/tether.
set(deb_conffiles "")
foreach(prog gateway client)
  if(EXISTS ${CMAKE_SOURCE_DIR}/config/${prog}.conf.example)
    string(APPEND deb_conffiles "${CMAKE_INSTALL_FULL_SYSCONFDIR}/tether/${prog}.conf\n")
  endif()
endforeach()
string(APPEND deb_conffiles
  "${CMAKE_INSTALL_FULL_SYSCONFDIR}/tether/prometheus/tether.rules.yml\n")
if(deb_conffiles)
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/conffiles "${deb_conffiles}")
  list(APPEND deb_control_extra ${CMAKE_BINARY_DIR}/packaging/conffiles)
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${deb_control_extra})
include(CPack)
