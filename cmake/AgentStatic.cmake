# cmake/AgentStatic.cmake: tether-client alone, linked with -static against
# glibc and the libraries' own archives (docs/0025-lean-static-agent.md).
# `make agent-static` configures one build per architecture with
#   -DTETHER_AGENT_STATIC=ON -DTETHER_ARCH=amd64|arm64|armhf
#   -DTETHER_STATIC_SYSROOT=DIR   (cross builds: Debian's -dev packages of
#                                  that architecture, extracted; empty for
#                                  the host's own)
# and CC set to the cross compiler.  No pkg-config: the archives' names are
# fixed, and the targets common/ links (PkgConfig::X) are defined here.
set(TETHER_ARCH "amd64" CACHE STRING "Debian architecture of this build")
set(TETHER_STATIC_SYSROOT "" CACHE PATH "extracted -dev packages of TETHER_ARCH")
set(arch_triplet_amd64 x86_64-linux-gnu)
set(arch_triplet_arm64 aarch64-linux-gnu)
set(arch_triplet_armhf arm-linux-gnueabihf)
set(triplet ${arch_triplet_${TETHER_ARCH}})
if(NOT triplet)
  message(FATAL_ERROR "TETHER_ARCH=${TETHER_ARCH}: want amd64, arm64 or armhf")
endif()

add_compile_definitions(TETHER_STATIC=1)
add_compile_options(-D_FORTIFY_SOURCE=2 -fstack-protector-strong -ffunction-sections
                    -fdata-sections)
add_link_options(-static -Wl,-z,relro,-z,now -Wl,--gc-sections)
if(TETHER_STATIC_SYSROOT)
  include_directories(SYSTEM ${TETHER_STATIC_SYSROOT}/usr/include/${triplet}
                      ${TETHER_STATIC_SYSROOT}/usr/include)
  link_directories(${TETHER_STATIC_SYSROOT}/usr/lib/${triplet})
endif()
# Archives need their users first: one group lets the linker go round.
set(CMAKE_C_LINK_EXECUTABLE "<CMAKE_C_COMPILER> <FLAGS> <CMAKE_C_LINK_FLAGS> <LINK_FLAGS> \
<OBJECTS> -o <TARGET> -Wl,--start-group <LINK_LIBRARIES> -Wl,--end-group")

foreach(lib OPENSSL MSGPACK JANSSON INIH LIBEVENT)
  add_library(PkgConfig::${lib} INTERFACE IMPORTED)
endforeach()
set_target_properties(PkgConfig::OPENSSL PROPERTIES INTERFACE_LINK_LIBRARIES "ssl;crypto")
set_target_properties(PkgConfig::MSGPACK PROPERTIES INTERFACE_LINK_LIBRARIES msgpackc)
set_target_properties(PkgConfig::JANSSON PROPERTIES INTERFACE_LINK_LIBRARIES jansson)
set_target_properties(PkgConfig::INIH PROPERTIES INTERFACE_LINK_LIBRARIES inih)
set_target_properties(PkgConfig::LIBEVENT PROPERTIES
  INTERFACE_LINK_LIBRARIES "event_openssl;event_core;event_extra;pthread")

add_subdirectory(common)
add_subdirectory(auth)
add_subdirectory(tunnel-client)
