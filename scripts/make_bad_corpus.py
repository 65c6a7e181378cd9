#!/usr/bin/env python3
"""Writes tests/corpus/safetensors/: broken safetensors files and shard directories, each paired
in expected.txt with the fragment its error message must contain, plus a few well-formed files
(good*) whose contents tests/test_safetensors.c checks. Plain stdlib, deterministic output:
re-running it must leave `git status` clean.

Usage: scripts/make_bad_corpus.py [OUT_DIR]   (default tests/corpus/safetensors)
"""
import json
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "corpus", "safetensors")

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4,
         "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1}

expected = []  # (relative path, fragment)


def raw(header_bytes, data=b"", length=None):
    """A file from raw header bytes; `length` overrides the 8-byte length field."""
    n = len(header_bytes) if length is None else length
    return struct.pack("<Q", n) + header_bytes + data


def header_json(obj):
    # Sorted keys and no spaces, as MLX (nlohmann) writes it.
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def build(tensors, metadata=None, pad=False):
    """tensors: list of (name, dtype, shape, payload bytes) in data order; offsets packed."""
    hdr, data = {}, b""
    for name, dtype, shape, payload in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape,
                     "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata is not None:
        hdr["__metadata__"] = metadata
    h = header_json(hdr)
    if pad:  # what the Python safetensors writer does: spaces up to a multiple of 8
        h += b" " * ((8 - len(h) % 8) % 8)
    return raw(h, data)


def write(rel, content):
    path = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)


def bad(rel, content, fragment):
    write(rel, content)
    expected.append((rel.split("/")[0], fragment))


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


# A small valid file used as the base of several broken ones.
A = ("a", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))
B = ("b", "U8", [4], bytes([9, 8, 7, 6]))
BASE = build([A, B], {"format": "mlx"})


def entries(**kw):
    return header_json(kw)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)

    # --- framing ---------------------------------------------------------------------------
    bad("empty.safetensors", b"", "file is 0 bytes, too short for the 8-byte header length")
    bad("truncated_length.safetensors", b"\x10\x00\x00", "file is 3 bytes, too short")
    bad("truncated_header.safetensors", BASE[:40], "runs past the end of the file")
    hlen = struct.unpack("<Q", BASE[:8])[0]
    bad("truncated_data.safetensors", BASE[:8 + hlen + 26],
        "tensor 'b': data_offsets [24,28] run past the data area of 26 bytes")
    bad("header_past_end.safetensors", raw(b"{}", length=1000),
        "header length 1000 runs past the end of the file (2 bytes after the length field)")
    bad("huge_header_length.safetensors", raw(b"{}", length=1 << 63),
        "header length 9223372036854775808 exceeds the limit of 100000000 bytes")
    bad("zero_header_length.safetensors", raw(b"", b"abcd"), "header length is 0")

    # --- JSON ------------------------------------------------------------------------------
    bad("not_json.safetensors", raw(b'{"a": {"dtype": "F32",'), "header is not valid JSON")
    bad("binary_header.safetensors", raw(bytes(range(200, 256))), "header is not valid JSON")
    bad("not_object.safetensors", raw(b"[1,2,3]"), "header is an array, expected a JSON object")
    bad("string_header.safetensors", raw(b'"hello"'), "header is a string, expected a JSON object")
    bad("trailing_garbage.safetensors", raw(b"{}  xyz"),
        "header has extra bytes after the JSON value (at byte 4 of 7)")

    # --- tensor entries --------------------------------------------------------------------
    def one(name, entry, data=b"", **kw):
        return raw(header_json({name: entry, **kw}), data)

    bad("entry_not_object.safetensors", one("w", "F32"),
        "tensor 'w': entry is a string, expected an object")
    bad("missing_dtype.safetensors", one("w", {"shape": [1], "data_offsets": [0, 4]}, b"\0" * 4),
        "tensor 'w': missing \"dtype\"")
    bad("missing_shape.safetensors", one("w", {"dtype": "F32", "data_offsets": [0, 4]}, b"\0" * 4),
        "tensor 'w': missing \"shape\"")
    bad("missing_offsets.safetensors", one("w", {"dtype": "F32", "shape": [1]}, b"\0" * 4),
        "tensor 'w': missing \"data_offsets\"")
    bad("duplicate_field.safetensors",
        raw(b'{"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
        "tensor 'w': \"dtype\" appears twice")
    bad("unknown_dtype.safetensors",
        one("w", {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}, b"\0"),
        "tensor 'w': unknown dtype 'F4', expected one of BF16, F16, F32")
    bad("lowercase_dtype.safetensors",
        one("w", {"dtype": "bf16", "shape": [2], "data_offsets": [0, 4]}, b"\0" * 4),
        "tensor 'w': unknown dtype 'bf16'")
    bad("dtype_not_string.safetensors",
        one("w", {"dtype": 7, "shape": [2], "data_offsets": [0, 4]}, b"\0" * 4),
        "tensor 'w': dtype is a number, expected a string")
    bad("dtype_null.safetensors",
        one("w", {"dtype": None, "shape": [2], "data_offsets": [0, 4]}, b"\0" * 4),
        "tensor 'w': dtype is null, expected a string")
    bad("bool_dim.safetensors",
        one("w", {"dtype": "U8", "shape": [True], "data_offsets": [0, 1]}, b"\0"),
        "tensor 'w': shape[0] is a boolean, expected a non-negative integer")
    bad("shape_not_array.safetensors",
        one("w", {"dtype": "F32", "shape": 6, "data_offsets": [0, 24]}, b"\0" * 24),
        "tensor 'w': shape is a number, expected an array of non-negative integers")
    bad("negative_dim.safetensors",
        one("w", {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 24]}, b"\0" * 24),
        "tensor 'w': shape[1] is -3, expected a non-negative integer")
    bad("fractional_dim.safetensors",
        one("w", {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 6]}, b"\0" * 6),
        "tensor 'w': shape[0] is 1.5, expected a non-negative integer")
    bad("string_dim.safetensors",
        one("w", {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}, b"\0" * 8),
        "tensor 'w': shape[0] is a string, expected a non-negative integer")
    bad("too_many_dims.safetensors",
        one("w", {"dtype": "U8", "shape": [1] * 9, "data_offsets": [0, 1]}, b"\0"),
        "tensor 'w': shape has 9 dimensions, at most 8 are supported")
    bad("shape_overflow.safetensors",
        one("w", {"dtype": "F32", "shape": [1 << 32, 1 << 32, 16], "data_offsets": [0, 4]},
            b"\0" * 4),
        "tensor 'w': shape [4294967296,4294967296,16] of F32 needs more than 2^64 bytes")
    bad("huge_dim.safetensors",
        one("w", {"dtype": "U8", "shape": [1 << 60], "data_offsets": [0, 4]}, b"\0" * 4),
        "tensor 'w': shape[0] is 1.152921504606847e+18, expected a non-negative integer")
    bad("offsets_not_array.safetensors",
        one("w", {"dtype": "U8", "shape": [4], "data_offsets": 4}, b"\0" * 4),
        "tensor 'w': data_offsets is a number, expected [begin,end]")
    bad("offsets_three.safetensors",
        one("w", {"dtype": "U8", "shape": [4], "data_offsets": [0, 2, 4]}, b"\0" * 4),
        "tensor 'w': data_offsets has 3 elements, expected [begin,end]")
    bad("offsets_negative.safetensors",
        one("w", {"dtype": "U8", "shape": [4], "data_offsets": [-4, 0]}, b"\0" * 4),
        "tensor 'w': data_offsets[0] is -4, expected a non-negative integer")
    bad("offsets_reversed.safetensors",
        one("w", {"dtype": "U8", "shape": [4], "data_offsets": [8, 4]}, b"\0" * 8),
        "tensor 'w': data_offsets [8,4] end before they begin")
    bad("offsets_out_of_range.safetensors",
        one("w", {"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 32]}, b"\0" * 24),
        "tensor 'w': data_offsets [8,32] run past the data area of 24 bytes")
    bad("size_mismatch.safetensors",
        one("a.weight", {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 10]}, b"\0" * 24),
        "tensor 'a.weight': data_offsets [0,10] hold 10 bytes but shape [2,3] of F32 needs 24")
    bad("size_mismatch_bf16.safetensors",
        one("w", {"dtype": "BF16", "shape": [3], "data_offsets": [0, 12]}, b"\0" * 12),
        "tensor 'w': data_offsets [0,12] hold 12 bytes but shape [3] of BF16 needs 6")
    bad("overlap.safetensors",
        raw(header_json({"a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]},
                         "b": {"dtype": "F32", "shape": [6], "data_offsets": [16, 40]}}),
            b"\0" * 40),
        "tensors 'a' at [0,24] and 'b' at [16,40] overlap")
    bad("overlap_contained.safetensors",
        raw(header_json({"big": {"dtype": "U8", "shape": [100], "data_offsets": [0, 100]},
                         "c": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]},
                         "d": {"dtype": "U8", "shape": [8], "data_offsets": [100, 108]}}),
            b"\0" * 108),
        "tensors 'big' at [0,100] and 'c' at [4,8] overlap")
    bad("overlap_same_span.safetensors",
        raw(header_json({"x": {"dtype": "U16", "shape": [2], "data_offsets": [0, 4]},
                         "y": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}),
            b"\0" * 4),
        "tensors 'x' at [0,4] and 'y' at [0,4] overlap")
    bad("duplicate_tensor.safetensors",
        raw(b'{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
            b'"w":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', b"\0" * 4),
        "tensor 'w' appears twice in the header")

    # --- __metadata__ ----------------------------------------------------------------------
    ok_entry = {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}
    bad("metadata_not_object.safetensors", one("w", ok_entry, b"\0", __metadata__=["mlx"]),
        "__metadata__ is an array, expected an object mapping strings to strings")
    bad("metadata_value_number.safetensors",
        one("w", ok_entry, b"\0", __metadata__={"format": "mlx", "total": 5}),
        "__metadata__ 'total' is a number, expected a string")
    bad("metadata_value_object.safetensors",
        one("w", ok_entry, b"\0", __metadata__={"nested": {"a": "b"}}),
        "__metadata__ 'nested' is an object, expected a string")
    bad("metadata_twice.safetensors",
        raw(b'{"__metadata__":{"a":"b"},"__metadata__":{"c":"d"}}'),
        "__metadata__ appears twice")
    bad("metadata_duplicate_key.safetensors",
        raw(b'{"__metadata__":{"format":"mlx","format":"pt"}}'),
        "__metadata__ key 'format' appears twice")

    # --- shard directories -----------------------------------------------------------------
    s1 = build([A], {"format": "mlx"})
    s2 = build([B], {"format": "mlx"})
    n1, n2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"

    def index(wm):
        return json.dumps({"metadata": {"total_size": 28}, "weight_map": wm}, indent=4).encode()

    write("shard_missing/" + n1, s1)
    write("shard_missing/model.safetensors.index.json", index({"a": n1, "b": n2}))
    expected.append(("shard_missing", "model.safetensors.index.json: weight_map puts tensor 'b' "
                     "in 'model-00002-of-00002.safetensors', which cannot be opened"))

    write("shard_tensor_missing/" + n1, s1)
    write("shard_tensor_missing/" + n2, s2)
    write("shard_tensor_missing/model.safetensors.index.json",
          index({"a": n1, "b": n2, "c": n2}))
    expected.append(("shard_tensor_missing", "weight_map puts tensor 'c' in "
                     "'model-00002-of-00002.safetensors', but "))
    expected.append(("shard_tensor_missing", "model-00002-of-00002.safetensors has no such tensor"))

    write("shard_duplicate/" + n1, s1)
    write("shard_duplicate/" + n2, build([A, B]))
    expected.append(("shard_duplicate", "tensor 'a' is in both "))
    expected.append(("shard_duplicate", "shard_duplicate/model-00001-of-00002.safetensors and "))
    expected.append(("shard_duplicate", "shard_duplicate/model-00002-of-00002.safetensors"))

    write("shard_corrupt/" + n1, s1)
    write("shard_corrupt/" + n2, one("b", {"dtype": "Q4", "shape": [4], "data_offsets": [0, 4]},
                                     b"\0" * 4))
    expected.append(("shard_corrupt", "model-00002-of-00002.safetensors: tensor 'b': unknown "
                     "dtype 'Q4'"))

    write("shard_none/README.txt", b"No model*.safetensors here.\n")
    write("shard_none/weights.safetensors", s1)
    expected.append(("shard_none", "no model.safetensors.index.json and no model*.safetensors"))

    write("index_not_json/" + n1, s1)
    write("index_not_json/model.safetensors.index.json", b'{"weight_map": {"a": ')
    expected.append(("index_not_json", "model.safetensors.index.json: not valid JSON"))

    write("index_not_object/" + n1, s1)
    write("index_not_object/model.safetensors.index.json", b'["a"]')
    expected.append(("index_not_object", "model.safetensors.index.json: is an array, expected an "
                     "object with \"weight_map\""))

    write("index_no_weight_map/" + n1, s1)
    write("index_no_weight_map/model.safetensors.index.json", b'{"metadata": {}}')
    expected.append(("index_no_weight_map",
                     "weight_map is missing, expected an object mapping tensor names to files"))

    write("index_empty_weight_map/" + n1, s1)
    write("index_empty_weight_map/model.safetensors.index.json", index({}))
    expected.append(("index_empty_weight_map", "weight_map is empty"))

    write("index_entry_not_string/" + n1, s1)
    write("index_entry_not_string/model.safetensors.index.json", index({"a": 1}))
    expected.append(("index_entry_not_string",
                     "weight_map entry 'a' is a number, expected a file name"))

    write("index_escapes_dir/" + n1, s1)
    write("index_escapes_dir/model.safetensors.index.json",
          index({"a": "../overlap.safetensors"}))
    expected.append(("index_escapes_dir", "weight_map entry 'a' names '../overlap.safetensors', "
                     "expected a file name in the same directory"))

    # --- well-formed files (checked value by value in tests/test_safetensors.c) -------------
    bf16 = struct.pack("<6H", 0x3F80, 0x4000, 0xBF80, 0x0000, 0x7F80, 0x3E80)  # 1 2 -1 0 inf .25
    good = [
        # data order deliberately not name order, as MLX writes it
        ("w.bf16", "BF16", [2, 3], bf16),
        ("v.f32", "F32", [4], f32(1.5, -2.0, 3.25, 0.0)),
        ("q.u32", "U32", [2, 2], struct.pack("<4I", 0xDEADBEEF, 1, 2, 0xFFFFFFFF)),
        ("s.i8", "I8", [3], struct.pack("<3b", -128, 0, 127)),
        ("m.bool", "BOOL", [2], b"\x01\x00"),
        ("h.f16", "F16", [1], struct.pack("<H", 0x3C00)),
        ("scalar.f64", "F64", [], struct.pack("<d", 3.141592653589793)),
        ("empty.u8", "U8", [0, 5], b""),
        ("n.i64", "I64", [1, 1, 1], struct.pack("<q", -(1 << 40))),
        ("e.f8", "F8_E4M3", [4], bytes([0x38, 0x40, 0xB8, 0x7E])),
        ("f.f8", "F8_E5M2", [2], bytes([0x3C, 0x40])),
        ("u16", "U16", [2], struct.pack("<2H", 1, 65535)),
        ("i16", "I16", [2], struct.pack("<2h", -2, 2)),
        ("i32", "I32", [1], struct.pack("<i", -7)),
        ("u64", "U64", [1], struct.pack("<Q", (1 << 64) - 1)),
    ]
    write("good.safetensors", build(good, {"format": "mlx", "note": "made by make_bad_corpus.py"}))
    write("good_padded.safetensors", build([A, B], {"format": "pt"}, pad=True))
    write("good_no_metadata.safetensors", build([B]))
    write("good_empty.safetensors", raw(b"{}"))

    for d in ("good_sharded_index", "good_sharded_glob"):
        write(d + "/" + n1, s1)
        write(d + "/" + n2, s2)
    write("good_sharded_index/model.safetensors.index.json", index({"a": n1, "b": n2}))
    # A model*.safetensors the index does not name is refused: mlx-lm ignores the index and
    # would load it. Files not named model*.safetensors are ignored.
    for rel, content in ((n1, s1), (n2, s2),
                         ("model.safetensors.index.json", index({"a": n1, "b": n2}))):
        write("stray_shard/" + rel, content)
    bad("stray_shard/model-extra.safetensors", b"not a safetensors file",
        "'model-extra.safetensors' is a model*.safetensors file the weight_map does not name")
    write("good_sharded_glob/other.safetensors", b"not a safetensors file")
    write("good_single_dir/model.safetensors", BASE)

    with open(os.path.join(OUT, "expected.txt"), "w") as f:
        f.write("# entry<TAB>fragment its st_open error must contain (made by "
                "scripts/make_bad_corpus.py)\n")
        for rel, frag in expected:
            f.write("%s\t%s\n" % (rel, frag))
    print("wrote %d broken cases to %s" % (len({r for r, _ in expected}), OUT))


if __name__ == "__main__":
    main()
