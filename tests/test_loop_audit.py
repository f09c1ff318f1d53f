"""scripts/loop_audit.py: the loop finder on synthetic disassembly (fast), and the
register blocks of the main float32 tiles of AVX-512 and AVX2 compiled for real:
their fold loops keep the accumulators in registers (needs a C++ compiler and
objdump on x86-64; DETCONV_SKIP_LOOP_AUDIT=1 skips). The objects come from the
build tree `pip install .` left in the checkout when they are current
(loop_audit.built_units: seconds), else they are compiled here (minutes per ISA)."""

import os
import platform
import re
import shutil
from pathlib import Path

import pytest
from helpers import load_script

ROOT = Path(__file__).resolve().parent.parent
la = load_script("loop_audit.py", "detconv_loop_audit")

SYNTHETIC = """
0000000000000000 <f(int)>:
   0:\tpush   %rbp
  10:\tvmovups (%rdx),%zmm1
  16:\tvfmadd231ps %zmm1,%zmm2,%zmm3
  1c:\tvfmadd231ps %zmm1,%zmm2,%zmm4
  22:\tvmovaps %zmm4,0x40(%rsp)
  2a:\tvmovaps 0x40(%rsp),%zmm4
  32:\tjne    10 <f(int)+0x10>
  34:\tvfmadd231ps 0x80(%rsp,%rax,4),%zmm2,%zmm5
  3a:\tjl     10 <f(int)+0x10>
  3c:\tret

0000000000000040 <g()>:
  40:\tvfnmadd231ps %zmm1,%zmm2,%zmm3
  46:\tjmp    40 <g()>
"""


def test_loops_finds_innermost_loops_and_counts():
    found = la.loops(SYNTHETIC)
    # f's outer loop (10..3a) holds the inner one (10..32): only the inner one is innermost.
    assert [(lp.function, lp.start, lp.end, lp.fmas, lp.stack) for lp in found] == [
        ("f(int)", 0x10, 0x32, 2, 2),
        ("g()", 0x40, 0x46, 1, 0),
    ]
    assert la.violations(found, min_fma=2, max_stack=1) == [found[0]]
    assert la.violations(found, min_fma=2, max_stack=2) == []


def test_flags_are_cmakes():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    for flag in [f for f in la.COMMON_FLAGS if f not in ("-DNDEBUG", "-fPIC", "-std=gnu++17")]:
        assert flag in cmake, flag
    for flags in la.UNIT_FLAGS.values():
        for flag in flags:
            assert flag in cmake, flag


def _build_tree(root, isa, flags, source=None, parts=la.PARTS):
    """A fake checkout with one source and header, and a Ninja tree that built kernels_<isa>.cc's parts:
    their objects."""
    (root / "csrc" / "cpu").mkdir(parents=True, exist_ok=True)
    (root / "csrc" / "detconv").mkdir(exist_ok=True)
    src = root / "csrc" / "cpu" / f"kernels_{isa}.cc"
    src.write_text("// unit\n")
    (root / "csrc" / "detconv" / "order.h").write_text("// header\n")
    tree = root / "build" / "temp.linux-x86_64-cpython-311" / "cmake"
    edges, objs = [], []
    for part in parts:
        obj_rel = la.part_object(isa, part)
        (tree / obj_rel).parent.mkdir(parents=True)
        edges.append(f"build {obj_rel}: CXX_COMPILER__detconv_cpu_{isa}_{part}_unscanned_Release {source or src} || "
                     f"order_deps\n  DEFINES = -DDETCONV_CPU_PART_{part.upper()}=1\n  FLAGS = {' '.join(flags)}\n\n")
        obj = tree / obj_rel
        obj.write_bytes(b"")
        os.utime(obj, (2e9, 2e9))  # built after every source
        objs.append(obj)
    (tree / "build.ninja").write_text("".join(edges) + f"build other.o: CXX {src}\n")
    return objs


def test_built_units_only_when_current_and_same_flags(tmp_path):
    flags = [*la.COMMON_FLAGS, *la.UNIT_FLAGS["avx2"], "-Wall"]
    objs = _build_tree(tmp_path / "a", "avx2", flags)
    assert la.built_units("avx2", root=tmp_path / "a") == objs
    assert la.built_units("avx512", root=tmp_path / "a") is None  # no such objects
    os.utime(tmp_path / "a" / "csrc" / "detconv" / "order.h", (3e9, 3e9))  # a header edited since
    assert la.built_units("avx2", root=tmp_path / "a") is None
    _build_tree(tmp_path / "b", "avx2", [f for f in flags if f != "-frounding-math"])
    assert la.built_units("avx2", root=tmp_path / "b") is None  # built with other flags
    _build_tree(tmp_path / "c", "avx2", flags, source="/elsewhere/csrc/cpu/kernels_avx2.cc")
    assert la.built_units("avx2", root=tmp_path / "c") is None  # another checkout's objects
    _build_tree(tmp_path / "d", "avx2", flags, parts=la.PARTS[:-1])
    assert la.built_units("avx2", root=tmp_path / "d") is None  # a part missing
    assert la.built_units("avx2", trees=[], root=tmp_path / "a") is None


def test_parts_are_cmakes():
    # CMakeLists.txt compiles every kernels_<isa>.cc once per part that kernels_impl.h knows, the audit
    # reads those objects (la.PARTS), and a unit given no part stops with an error.
    cmake = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"foreach\(_part ([a-z ]+)\)", cmake)
    assert m and tuple(m.group(1).split()) == la.PARTS
    impl = (ROOT / "csrc" / "cpu" / "kernels_impl.h").read_text()
    for part in la.PARTS:
        assert f"DETCONV_CPU_PART_{part.upper()}" in impl
    assert "#error" in impl


def _can_compile():
    return (platform.machine() in ("x86_64", "AMD64") and shutil.which("objdump")
            and (os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")))


# The main float32 tiles of each ISA and the fmas one step of their fold runs. An AVX-512 fold loop may
# keep one accumulator on the stack (28 + 4 filter or dy vectors + a broadcast is 33 of 32 registers): a
# load and a store per step, and a little set-up. AVX2's tiles fit its 16 registers (12 accumulators);
# its 6x2 filter-gradient loop once stored all 12 every step (13 stack accesses: 3x3 28x28 128->128 dw
# at 0.55-0.60 of oneDNN on an Intel Xeon, 0.81-0.88 once fixed).
TILES = {
    "avx512": {
        "wgrad_dense<7, 4, true, float>": 28,   # stems' joint (kw, i) tiles, x packed
        "wgrad_joint_fold<7, 4>": 28,           # the same, x read in place
        "wgrad_dense<6, 4, false, float>": 24,  # dense filter gradient, 64+ output channels
        "fprop_1x1<7, 4, float>": 28,           # 1x1 GEMM (forward and input gradient)
    },
    "avx2": {
        "wgrad_dense<6, 2, false, float>": 12,  # dense filter gradient (x packed, in place, by segment)
        "fprop_1x1<6, 2, float>": 12,           # 1x1 GEMM
        "sweep_taps<3, 4, false>": 12,          # the forward's and 3-D input gradient's 3x4 tile
    },
}
MAX_STACK = 4


@pytest.mark.skipif(os.environ.get("DETCONV_SKIP_LOOP_AUDIT") == "1", reason="DETCONV_SKIP_LOOP_AUDIT=1")
@pytest.mark.skipif(not _can_compile(), reason="needs x86-64, a C++ compiler and objdump")
@pytest.mark.parametrize("isa", sorted(TILES))
def test_main_tiles_keep_accumulators_in_registers(isa, tmp_path):
    found = la.loops(la.disassemble(la.unit_objects(isa, tmp_path)))
    for name, fmas in TILES[isa].items():
        pat = re.compile(r"(^|::)" + re.escape(name) + r"\(")
        folds = [lp for lp in found if pat.search(lp.function) and lp.fmas >= fmas]
        assert folds, f"no fold loop of {fmas}+ fmas found in {name}"
        spilled = [(hex(lp.start), lp.fmas, lp.stack) for lp in folds if lp.stack > MAX_STACK]
        assert not spilled, f"{name}: fold loops with more than {MAX_STACK} stack accesses: {spilled}"
