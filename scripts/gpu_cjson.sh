# Sourced by the GPU scripts: the GPU image may lack libcjson-dev and libmicrohttpd (the `mlxrt`
# binary links it for `serve`), so unpack the .deb files carried in .debs/ (libcjson1,
# libcjson-dev, libmicrohttpd12; see the device notes) and point CMake and the loader at them.
# Sets CJSON_CMAKE (an array of CMake arguments, empty when the system has cJSON) and extends
# LD_LIBRARY_PATH. Run from the repository root.
CJSON_CMAKE=()
if [ ! -f "${CJSON_HEADER:-/usr/include/cjson/cJSON.h}" ] && ls .debs/*.deb >/dev/null 2>&1; then
  CJ=${CJSON_DIR:-/tmp/mlxrt-cjson}
  mkdir -p "$CJ"
  for f in .debs/*.deb; do dpkg -x "$f" "$CJ"; done
  CJ_LIB=$(dirname "$(find "$CJ" -name 'libcjson.so*' | head -1)")
  [ -e "$CJ_LIB/libcjson.so" ] || ln -sf "$(ls "$CJ_LIB"/libcjson.so.* | head -1)" "$CJ_LIB/libcjson.so"
  CJSON_CMAKE=(-DCJSON_INCLUDE_DIR="$CJ/usr/include" -DCJSON_LIBRARY="$CJ_LIB/libcjson.so")
  export LD_LIBRARY_PATH="$CJ_LIB:${LD_LIBRARY_PATH:-}"
fi
