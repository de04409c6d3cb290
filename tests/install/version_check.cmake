# cmake -DVERSION_FILE=.../graftConfigVersion.cmake -P version_check.cmake
# Asks the installed version file what find_package(graft VERSION) would ask
# and fails (exit 1) on any wrong answer: requests for this version or an
# older one of the same minor (0.x) / major series are accepted, newer ones
# and other series refused, a 32-bit consumer of this 64-bit library
# refused as unsuitable.
cmake_minimum_required(VERSION 3.16)

# Sets the variables find_package sets for a request of `request` ("" for
# none), reads the version file, and checks its two answers.
function(expect request compatible unsuitable sizeof_void_p)
  set(PACKAGE_FIND_VERSION "${request}")
  set(PACKAGE_FIND_VERSION_COUNT 0)
  set(PACKAGE_FIND_VERSION_MAJOR 0)
  set(PACKAGE_FIND_VERSION_MINOR 0)
  set(PACKAGE_FIND_VERSION_PATCH 0)
  if(NOT request STREQUAL "")
    string(REPLACE "." ";" parts "${request}")
    list(LENGTH parts PACKAGE_FIND_VERSION_COUNT)
    set(i 0)
    foreach(name MAJOR MINOR PATCH)
      if(i LESS PACKAGE_FIND_VERSION_COUNT)
        list(GET parts ${i} PACKAGE_FIND_VERSION_${name})
      endif()
      math(EXPR i "${i} + 1")
    endforeach()
  endif()
  set(CMAKE_SIZEOF_VOID_P ${sizeof_void_p})
  set(PACKAGE_VERSION_UNSUITABLE FALSE)
  include("${VERSION_FILE}")
  if(NOT PACKAGE_VERSION_COMPATIBLE STREQUAL compatible
     OR NOT PACKAGE_VERSION_UNSUITABLE STREQUAL unsuitable)
    message(SEND_ERROR "graftConfigVersion.cmake (graft ${PACKAGE_VERSION}), request "
            "'${request}' from a ${sizeof_void_p}-byte-pointer project: compatible "
            "${PACKAGE_VERSION_COMPATIBLE}, unsuitable ${PACKAGE_VERSION_UNSUITABLE}; "
            "expected ${compatible}, ${unsuitable}")
    set_property(GLOBAL APPEND PROPERTY wrong_answers "${request}")
  endif()
endfunction()

if(NOT EXISTS "${VERSION_FILE}")
  message(FATAL_ERROR "no version file '${VERSION_FILE}'")
endif()
include("${VERSION_FILE}")
set(version "${PACKAGE_VERSION}")
string(REPLACE "." ";" parts "${version}")
list(GET parts 0 major)
list(GET parts 1 minor)
math(EXPR next_major "${major} + 1")
math(EXPR next_minor "${minor} + 1")

expect("" TRUE FALSE 8)
expect("${version}" TRUE FALSE 8)
expect("${major}.${minor}" TRUE FALSE 8)
expect("${major}" TRUE FALSE 8)
expect("${major}.${next_minor}" FALSE FALSE 8)
expect("${next_major}.0" FALSE FALSE 8)
if(major EQUAL 0 AND minor GREATER 0)
  math(EXPR prev_minor "${minor} - 1")
  expect("0.${prev_minor}" FALSE FALSE 8)
elseif(major GREATER 0)
  expect("${major}.0" TRUE FALSE 8)
endif()
expect("${version}" TRUE TRUE 4)
get_property(wrong GLOBAL PROPERTY wrong_answers)
if(wrong)
  message(FATAL_ERROR "graftConfigVersion.cmake answered wrong to: ${wrong}")
endif()
message(STATUS "graftConfigVersion.cmake (graft ${version}) answers every request as expected")
