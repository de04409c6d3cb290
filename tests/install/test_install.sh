#!/bin/sh
# Installs graft into a scratch DESTDIR and uses it the ways the README's
# "Linking" section shows, each as written there: the README's example as
# app.c, built with
#   cc app.c -o app $(pkg-config --cflags --libs graft)
#   cc app.c -o app $(pkg-config --cflags graft) -Wl,--as-needed -l:libgraft.a $(pkg-config --static --libs graft)
#   CMake: find_package(graft) and graft::graft (tests/install/CMakeLists.txt)
# and run.  For a system prefix (/usr, /usr/local) it also checks what a
# new user relies on without setting anything: graft.pc on pkg-config's
# default search path and libgraft.so in a directory the loader searches
# (ld.so.conf); meson's own default libdir (lib64 without dpkg-dev) is in
# neither on Debian.  Then the CMake version file's answers.
#
# usage: test_install.sh MESON BUILD_DIR PREFIX LIBDIR APP_C CMAKE_DIR SANITIZE
#   APP_C: the README's example; CMAKE_DIR: CMakeLists.txt and version_check.cmake;
#   SANITIZE: the build's b_sanitize (sanitizer builds skip: their libgraft.so
#   needs the sanitizer runtime loaded before it).
# Exit 0 when all worked, 77 (skip) in a sanitizer build, 1 with a message
# saying which step failed otherwise.
set -u

if [ $# -ne 7 ]; then
  echo "usage: $0 MESON BUILD_DIR PREFIX LIBDIR APP_C CMAKE_DIR SANITIZE" >&2
  exit 2
fi
meson=$1 build=$2 prefix=$3 libdir=$4 app_c=$5 cmake_dir=$6 sanitize=$7
cc=${CC:-cc}
# meson test points LD_LIBRARY_PATH at the build tree's libgraft.so: each
# program here must find the installed one, the way a user's would.
unset LD_LIBRARY_PATH

if [ "$sanitize" != none ]; then
  echo "install: skipped in a -Db_sanitize=$sanitize build (its libgraft.so needs the sanitizer runtime)"
  exit 77
fi

step() { echo "==> $*"; }
# fail STEP [LOG]: says which step failed, with its output, and exits 1.
fail() {
  echo "install: FAILED: $1" >&2
  if [ $# -gt 1 ] && [ -s "$2" ]; then sed 's/^/    /' "$2" >&2; fi
  exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/graft-install.XXXXXX") || fail "mktemp -d"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
root=$tmp/root
log=$tmp/log
case $libdir in /*) libdir_abs=$libdir ;; *) libdir_abs=$prefix/$libdir ;; esac

step "meson install --destdir $root (prefix $prefix, libdir $libdir)"
"$meson" install -C "$build" --no-rebuild --quiet --destdir "$root" >"$log" 2>&1 ||
  fail "meson install -C $build --destdir $root" "$log"
for f in "$libdir_abs/libgraft.so" "$libdir_abs/libgraft.a" "$libdir_abs/pkgconfig/graft.pc" \
         "$libdir_abs/cmake/graft/graftConfig.cmake" \
         "$libdir_abs/cmake/graft/graftConfigVersion.cmake" "$prefix/include/graft.h"; do
  [ -e "$root$f" ] || fail "meson install did not install $f; it installed: $(cd "$root" && find . -type f | tr '\n' ' ')"
done

# pkg-config sees the scratch tree as the system would see the real one: its
# own default directories, each under $root (PKG_CONFIG_SYSROOT_DIR puts
# $root before the -I and -L paths too).  For another prefix a user sets
# PKG_CONFIG_PATH and LD_LIBRARY_PATH, and so does this test.
default_pc_path=$(pkg-config --variable pc_path pkg-config) || fail "pkg-config --variable pc_path pkg-config"
PKG_CONFIG_PATH=
old_ifs=$IFS
IFS=:
for d in $default_pc_path; do PKG_CONFIG_PATH=$PKG_CONFIG_PATH${PKG_CONFIG_PATH:+:}$root$d; done
IFS=$old_ifs
case $prefix in
  /usr | /usr/local) system_prefix=1 ;;
  *) system_prefix=0; PKG_CONFIG_PATH=$root$libdir_abs/pkgconfig:$PKG_CONFIG_PATH ;;
esac
PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

if [ $system_prefix -eq 1 ]; then
  step "graft.pc on pkg-config's default search path ($default_pc_path)"
else
  step "graft.pc through PKG_CONFIG_PATH ($prefix is not a system prefix)"
fi
pcdir=$(pkg-config --variable=pcfiledir graft 2>"$log") ||
  fail "pkg-config does not find graft.pc, installed in $libdir_abs/pkgconfig, on $default_pc_path (meson's default libdir without dpkg-dev is lib64: configure with make, which sets --libdir, or meson configure $build --libdir=lib/\$(cc -print-multiarch))" "$log"
[ "$pcdir" = "$root$libdir_abs/pkgconfig" ] ||
  fail "pkg-config found graft.pc in $pcdir, not in this test's install $root$libdir_abs/pkgconfig"

# ld_conf_dirs FILE: the directories FILE (ld.so.conf syntax) lists, with
# the files its include lines name.
ld_conf_dirs() {
  while read -r word rest; do
    case $word in
      '' | '#'*) ;;
      include) for f in $rest; do [ -f "$f" ] && ld_conf_dirs "$f"; done ;;
      *) echo "$word" ;;
    esac
  done <"$1"
}
if [ $system_prefix -eq 1 ] && [ -f /etc/ld.so.conf ]; then
  step "$libdir_abs among the loader's directories (/etc/ld.so.conf)"
  multiarch=$("$cc" -print-multiarch 2>/dev/null)
  found=0
  for d in $(ld_conf_dirs /etc/ld.so.conf) /lib /usr/lib ${multiarch:+/lib/$multiarch /usr/lib/$multiarch}; do
    [ "${d%/}" = "$libdir_abs" ] && found=1
  done
  [ $found -eq 1 ] ||
    fail "libgraft.so goes to $libdir_abs, which the loader does not search (ld.so.conf: $(ld_conf_dirs /etc/ld.so.conf | tr '\n' ' '))"
fi

# ldd_graft BINARY: the libgraft.so BINARY loads (LD_LIBRARY_PATH as set).
ldd_graft() { ldd "$1" | sed -n 's/^[[:space:]]*libgraft\.so[^ ]* => \([^ ]*\).*/\1/p'; }

mkdir "$tmp/pc" "$tmp/static" "$tmp/cmake" || fail "mkdir in $tmp"
cp "$app_c" "$tmp/pc/app.c" && cp "$app_c" "$tmp/static/app.c" && cp "$app_c" "$tmp/cmake/app.c" &&
  cp "$cmake_dir/CMakeLists.txt" "$tmp/cmake/" || fail "copying the example into $tmp"

step "cc app.c -o app \$(pkg-config --cflags --libs graft)"
(cd "$tmp/pc" && "$cc" app.c -o app $(pkg-config --cflags --libs graft)) >"$log" 2>&1 ||
  fail "cc app.c -o app $(pkg-config --cflags --libs graft)" "$log"
lib=$(LD_LIBRARY_PATH=$root$libdir_abs ldd_graft "$tmp/pc/app")
[ "$lib" = "$root$libdir_abs/libgraft.so.${lib##*libgraft.so.}" ] ||
  fail "the pkg-config build loads libgraft.so from '$lib', not from $root$libdir_abs"
(cd "$tmp/pc" && LD_LIBRARY_PATH=$root$libdir_abs ./app) >"$log" 2>&1 ||
  fail "./app (pkg-config build, LD_LIBRARY_PATH=$root$libdir_abs) exited $?" "$log"

step "cc app.c -o app \$(pkg-config --cflags graft) -Wl,--as-needed -l:libgraft.a \$(pkg-config --static --libs graft)"
(cd "$tmp/static" &&
  "$cc" app.c -o app $(pkg-config --cflags graft) -Wl,--as-needed -l:libgraft.a $(pkg-config --static --libs graft)) \
  >"$log" 2>&1 ||
  fail "static link: cc app.c -o app $(pkg-config --cflags graft) -Wl,--as-needed -l:libgraft.a $(pkg-config --static --libs graft)" "$log"
if readelf -d "$tmp/static/app" | grep -q 'NEEDED.*libgraft'; then
  fail "the static build still needs libgraft.so: $(readelf -d "$tmp/static/app" | grep NEEDED | tr -s ' ')"
fi
(cd "$tmp/static" && ./app) >"$log" 2>&1 || fail "./app (static libgraft.a build) exited $?" "$log"

if ! command -v cmake >/dev/null 2>&1; then
  fail "no cmake (Debian: cmake; make deps installs it)"
fi
step "CMake: find_package(graft), graft::graft (CMAKE_PREFIX_PATH=$root$prefix)"
cmake -S "$tmp/cmake" -B "$tmp/cmake/build" -DCMAKE_PREFIX_PATH="$root$prefix" >"$log" 2>&1 ||
  fail "cmake -S . -B build -DCMAKE_PREFIX_PATH=$root$prefix (find_package(graft))" "$log"
graft_dir=$(sed -n 's/^graft_DIR:[A-Z]*=//p' "$tmp/cmake/build/CMakeCache.txt")
[ "$graft_dir" = "$root$libdir_abs/cmake/graft" ] ||
  fail "find_package(graft) took graftConfig.cmake from '$graft_dir', not from $root$libdir_abs/cmake/graft"
cmake --build "$tmp/cmake/build" >"$log" 2>&1 || fail "cmake --build build" "$log"
lib=$(ldd_graft "$tmp/cmake/build/app")
[ "$lib" = "$root$libdir_abs/libgraft.so.${lib##*libgraft.so.}" ] ||
  fail "the CMake build loads libgraft.so from '$lib', not from $root$libdir_abs (CMake's build RPATH)"
(cd "$tmp/cmake" && build/app) >"$log" 2>&1 || fail "build/app (CMake build) exited $?" "$log"

step "graftConfigVersion.cmake's answers to version requests"
cmake -DVERSION_FILE="$root$libdir_abs/cmake/graft/graftConfigVersion.cmake" \
  -P "$cmake_dir/version_check.cmake" >"$log" 2>&1 || fail "cmake -P version_check.cmake" "$log"

echo "install: all passed"
