#!/usr/bin/env bash
# `cmake --install` of the build tree that holds $1 into a temporary prefix, then what a user of
# the installed tree sees:
#  - the files (bin/mlxrt, libmlxrt.so.MAJOR.MINOR.PATCH with its SONAME link and dev link,
#    mlxrt.h, pkgconfig/mlxrt.pc, the plug-in when the build has one) and nothing naming the
#    build folder (debug sections aside);
#  - libmlxrt.so's SONAME is libmlxrt.so.MAJOR and it exports only functions of mlxrt.h;
#  - the version: the header's MLXRT_VERSION_* = the file names = mlxrt.pc = `mlxrt --version`;
#  - examples/hello.c compiled with `cc` and the pkg-config flags alone runs without
#    LD_LIBRARY_PATH and prints mlx-lm's greedy text (tests/fixtures/real, capital_n16.raw) on
#    the demo model with --numerics mlx-cpu;
#  - the CUDA plug-in is found from the installed tree: beside libmlxrt.so (hello), in bin/'s
#    ../lib (bin/mlxrt) and in $MLXRT_PLUGIN_DIR first (stand-in plug-ins that only answer).
# Needs the demo model (scripts/make_demo_model.sh); MLXRT_ALLOW_MISSING_MODELS=1 skips that part.
set -u
MLXRT=$1
B=$(cd "$(dirname "$MLXRT")" && pwd -P)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
P=$T/prefix
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { # description, command...
  local what=$1
  shift
  if "$@"; then ok; else bad "$what"; fi
}
[ -f "$B/CMakeCache.txt" ] || { echo "FAIL: $B (the folder of $MLXRT) is not a CMake build folder"; exit 1; }
cache() { sed -n "s/^$1:[A-Z]*=//p" "$B/CMakeCache.txt"; }
LIBDIR=$(cache CMAKE_INSTALL_LIBDIR)
BINDIR=$(cache CMAKE_INSTALL_BINDIR)
INCDIR=$(cache CMAKE_INSTALL_INCLUDEDIR)
if ! cmake --install "$B" --prefix "$P" >"$T/install.log" 2>&1; then
  cat "$T/install.log"
  echo "FAIL: cmake --install $B --prefix $P"
  exit 1
fi
L=$P/$LIBDIR

# --- files and version
H=$P/$INCDIR/mlxrt.h
macro() { sed -n "s/^#define MLXRT_VERSION$1 \+\"\?\([0-9.]*\)\"\?$/\1/p" "$H"; }
MAJ=$(macro _MAJOR) MIN=$(macro _MINOR) PAT=$(macro _PATCH) VER=$(macro "")
check "mlxrt.h: MLXRT_VERSION '$VER' is not MAJOR.MINOR.PATCH '$MAJ.$MIN.$PAT'" \
  test -n "$MAJ" -a "$VER" = "$MAJ.$MIN.$PAT"
for f in "$P/$BINDIR/mlxrt" "$L/libmlxrt.so.$VER" "$L/pkgconfig/mlxrt.pc"; do
  check "$f is not installed" test -f "$f"
done
check "libmlxrt.so.$MAJ does not link to libmlxrt.so.$VER" test "$(readlink "$L/libmlxrt.so.$MAJ")" = "libmlxrt.so.$VER"
check "libmlxrt.so does not link to libmlxrt.so.$MAJ" test "$(readlink "$L/libmlxrt.so")" = "libmlxrt.so.$MAJ"
if [ -f "$B/libmlxrt-cuda.so" ]; then check "the CUDA plug-in is not installed in $L" test -f "$L/libmlxrt-cuda.so"; fi
soname=$(readelf -d "$L/libmlxrt.so.$VER" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "SONAME is '$soname', not libmlxrt.so.$MAJ" test "$soname" = "libmlxrt.so.$MAJ"
got=$("$P/$BINDIR/mlxrt" --version)
case "$got" in "mlxrt $VER" | "mlxrt $VER (commit "*) ok ;; *) bad "mlxrt --version printed '$got', not 'mlxrt $VER'" ;; esac
export PKG_CONFIG_PATH=$L/pkgconfig
check "mlxrt.pc's version is not $VER" test "$(pkg-config --modversion mlxrt)" = "$VER"

# --- exports: the public API only (and the version node)
nm -D --defined-only "$L/libmlxrt.so.$VER" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$T/exports"
others=$(grep -v '^mlxrt_' "$T/exports" | grep -vx "MLXRT_$MAJ" | tr '\n' ' ')
check "libmlxrt.so exports symbols outside the API: $others" test -z "$others"
undeclared=$(grep '^mlxrt_' "$T/exports" | while read -r s; do grep -qw "$s" "$H" || echo "$s"; done | tr '\n' ' ')
check "libmlxrt.so exports mlxrt_* functions mlxrt.h does not declare: $undeclared" test -z "$undeclared"
check "libmlxrt.so does not export mlxrt_model_load and mlxrt_version" \
  test "$(grep -cxE 'mlxrt_model_load|mlxrt_version' "$T/exports")" = 2

# --- no path of the build folder in what is installed (debug sections are not loaded)
find "$P" -type f | while read -r f; do
  if readelf -h "$f" >/dev/null 2>&1; then
    objcopy --strip-debug "$f" "$T/nodebug" && grep -qF "$B" "$T/nodebug" && echo "$f"
  else
    grep -qF "$B" "$f" && echo "$f"
  fi
done >"$T/named"
check "installed files name the build folder $B: $(tr '\n' ' ' <"$T/named")" test ! -s "$T/named"

# --- a program built with the pkg-config flags alone
if ! cc -o "$T/hello" examples/hello.c $(pkg-config --cflags --libs mlxrt) 2>"$T/cc.err"; then
  cat "$T/cc.err"
  bad "examples/hello.c does not build with cc and pkg-config --cflags --libs mlxrt"
else
  lib=$(ldd "$T/hello" | sed -n "s/^\s*libmlxrt.so.$MAJ => \(\S*\).*/\1/p")
  check "hello loads libmlxrt.so.$MAJ from '$lib', not $L" test "$lib" = "$L/libmlxrt.so.$MAJ"
  MODEL=${MLXRT_CACHE:-$HOME/.cache/mlxrt}/models/gemma-3-270m-4bit
  FIX=tests/fixtures/real/gemma-3-270m-4bit.json
  if [ -f "$MODEL/model.safetensors" ]; then
    want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['capital_n16']['raw'])" "$FIX")
    got=$(MLXRT_BACKEND=cpu MLXRT_NUMERICS=mlx-cpu "$T/hello" "$MODEL" \
          "The capital of France is" 16 2>"$T/hello.err")
    if [ "$got" = "$want" ]; then ok; else
      bad "hello printed $(printf %q "$got"), mlx-lm $(printf %q "$want")"
      cat "$T/hello.err"
    fi
  elif [ "${MLXRT_ALLOW_MISSING_MODELS:-0}" = 1 ]; then echo "SKIPPED: no demo model at $MODEL"
  else bad "no demo model at $MODEL (run scripts/make_demo_model.sh)"
  fi
fi

# --- the plug-in found from the installed tree: stand-ins that refuse with their own name
printf '%s\n' '#include <stdio.h>' '#include <mlxrt.h>' \
  'void *mlxrt_cuda_backend_create(const void *opt, mlxrt_error *err) {' \
  '  (void)opt; snprintf(err->msg, sizeof err->msg, "stand-in plug-in %s", WHERE); return NULL; }' >"$T/plugin.c"
mkdir -p "$T/env"
cc -shared -fPIC -I"$P/$INCDIR" -DWHERE='"of the library folder"' -o "$L/libmlxrt-cuda.so" "$T/plugin.c" &&
  cc -shared -fPIC -I"$P/$INCDIR" -DWHERE='"of MLXRT_PLUGIN_DIR"' -o "$T/env/libmlxrt-cuda.so" "$T/plugin.c" ||
  bad "cannot build the stand-in plug-ins"
FIXM=tests/fixtures/models/gemma4-dense-bf16
mkdir -p "$T/model"
cp "$FIXM/config.json" "$FIXM/model.safetensors" "$T/model/"
cp tests/fixtures/tokenizer/small-a.json "$T/model/tokenizer.json"
plugin() { # what it must say, command...
  local want=$1
  shift
  env -u MLXRT_PLUGIN_DIR "$@" >/dev/null 2>"$T/plugin.err"
  if grep -qF "stand-in plug-in $want" "$T/plugin.err"; then ok; else
    bad "$* did not load the plug-in $want:"
    cat "$T/plugin.err"
  fi
}
plugin "of the library folder" "$P/$BINDIR/mlxrt" run -m "$T/model" -p hi -n 1 --backend cuda
plugin "of MLXRT_PLUGIN_DIR" MLXRT_PLUGIN_DIR="$T/env" "$P/$BINDIR/mlxrt" run -m "$T/model" -p hi -n 1 --backend cuda
[ -x "$T/hello" ] && plugin "of the library folder" MLXRT_BACKEND=cuda "$T/hello" "$T/model" hi 1

echo "$pass passed, $fail failed"
[ $fail = 0 ]
