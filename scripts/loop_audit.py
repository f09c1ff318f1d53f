#!/usr/bin/env python3
"""Register-block audit of the CPU kernels: compiles one ISA's kernels
(csrc/cpu/kernels_<isa>.cc) with CMakeLists.txt's flags, disassembles them, and lists
every innermost loop that runs many fmas together with its stack accesses.

Why: a register block's accumulators must stay in registers across its fold.
A refactor that looks neutral can change GCC's register allocation of a whole
unit loop (a lambda it no longer inlines was enough: the AVX-512 stem filter
gradient went from 16 to 25 ms, every accumulator of the 7x4 tile stored and
reloaded each step), and callgrind cannot see it, because valgrind has no
AVX-512. The disassembly can: such a loop's stack accesses jump from 2 to 29.

    python scripts/loop_audit.py [--isa avx512 avx2] [--min-fma 16] [--max-stack 4] [--show N]

Exits 1 when an innermost loop with at least --min-fma fmas has more than
--max-stack stack accesses (the AVX-512 7x4 tiles keep one accumulator on the
stack: a load and a store per step). Needs a C++ compiler and objdump.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The flags CMakeLists.txt gives detconv_cpu (tests/test_loop_audit.py checks each one is there).
COMMON_FLAGS = ["-O3", "-DNDEBUG", "-std=gnu++17", "-fPIC", "-ffp-contract=off", "-fno-fast-math",
                "-fno-unsafe-math-optimizations", "-mno-stv"]
UNIT_FLAGS = {"avx2": ["-frounding-math"], "avx512": []}
# The units CMakeLists.txt compiles kernels_<isa>.cc as, one per part (csrc/cpu/kernels_impl.h).
PARTS = ("fprop", "dgrad", "wgrad", "table")

_FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
_STACK = re.compile(r"\(%r[sb]p\)|\(%r[sb]p,")


@dataclass
class Loop:
    function: str
    start: int  # address of the loop's first instruction
    end: int    # address of its backward jump
    insns: int
    fmas: int
    stack: int  # instructions that read or write the stack frame


def compile_units(isa, out_dir, cxx=None):
    """kernels_<isa>.cc compiled as CMakeLists.txt does, one object per part (PARTS) in out_dir; returns
    their paths."""
    cxx = cxx or os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise RuntimeError("no C++ compiler found (set CXX)")
    src = ROOT / "csrc" / "cpu" / f"kernels_{isa}.cc"
    objs = []
    for part in PARTS:
        obj = Path(out_dir) / f"kernels_{isa}_{part}.o"
        part_flag = f"-DDETCONV_CPU_PART_{part.upper()}=1"
        subprocess.run([cxx, f"-I{ROOT / 'csrc'}", *COMMON_FLAGS, *UNIT_FLAGS[isa], part_flag, "-c", str(src),
                        "-o", str(obj)], check=True)
        objs.append(obj)
    return objs


def build_trees(root=ROOT):
    """CMake build trees that may hold the kernel objects: setup.py's (`pip install .` builds in
    build/temp.*/cmake of the checkout) and $DETCONV_BUILD_DIR (a build of one's own)."""
    trees = sorted(Path(root).glob("build/temp.*/cmake"))
    if os.environ.get("DETCONV_BUILD_DIR"):
        trees.insert(0, Path(os.environ["DETCONV_BUILD_DIR"]))
    return trees


def part_object(isa, part):
    """Where CMake puts the object of one part of kernels_<isa>.cc, relative to its build tree."""
    return f"CMakeFiles/detconv_cpu_{isa}_{part}.dir/csrc/cpu/kernels_{isa}.cc.o"


def _ninja_rule(build_ninja: Path, obj_rel: str):
    """(source, FLAGS) of the Ninja edge that builds obj_rel, or None."""
    lines = build_ninja.read_text().splitlines()
    for k, line in enumerate(lines):
        if line.startswith(f"build {obj_rel}:"):
            source = line.split(":", 1)[1].split()[1]  # "build obj: RULE source || deps"
            for rest in lines[k + 1:]:
                if not rest.startswith(" "):
                    break
                key, _, value = rest.strip().partition(" = ")
                if key == "FLAGS":
                    return source, value.split()
            return source, []
    return None


def built_units(isa, trees=None, root=ROOT):
    """The objects a CMake (Ninja) build made of this checkout's kernels_<isa>.cc, one per part, if all
    are current: built from this very source with every flag compile_units passes, and newer than every
    file under csrc/ (all the unit can include of ours; Ninja keeps the exact list in its own binary
    log). Otherwise None, and compile_units makes them (minutes per ISA). CI installs with `pip install .`
    just before the tests, so they audit the objects that ship."""
    src = (Path(root) / "csrc" / "cpu" / f"kernels_{isa}.cc").resolve()
    newest = max(f.stat().st_mtime for f in (Path(root) / "csrc").rglob("*") if f.is_file())
    for tree in build_trees(root) if trees is None else trees:
        ninja, objs = Path(tree) / "build.ninja", []
        for part in PARTS:
            obj_rel = part_object(isa, part)
            obj = Path(tree) / obj_rel
            if not (obj.is_file() and ninja.is_file()) or obj.stat().st_mtime < newest:
                break
            rule = _ninja_rule(ninja, obj_rel)
            if rule is None or (Path(tree) / rule[0]).resolve() != src:  # (an absolute source path stays itself)
                break
            if not all(flag in rule[1] for flag in [*COMMON_FLAGS, *UNIT_FLAGS[isa]]):  # not a Debug build, say
                break
            objs.append(obj)
        else:
            return objs
    return None


def unit_objects(isa, out_dir):
    """The objects to audit for one ISA: the build's (built_units), or compiled here."""
    return built_units(isa) or compile_units(isa, out_dir)


def disassemble(objs):
    return "".join(subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(obj)], check=True,
                                  capture_output=True, text=True).stdout for obj in objs)


def loops(disasm):
    """Every innermost loop (a backward jump whose range holds no other backward jump) of every function."""
    out = []
    func, insns = None, []

    def flush():
        if func is None:
            return
        addrs = [a for a, _, _ in insns]
        index = {a: i for i, a in enumerate(addrs)}
        back = []  # (first index, jump index)
        for i, (a, op, args) in enumerate(insns):
            m = re.match(r"([0-9a-f]+)\b", args) if op.startswith("j") else None
            target = int(m.group(1), 16) if m else None
            if target is not None and target < a and target in index:
                back.append((index[target], i))
        for s, e in back:
            if any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in back):
                continue  # holds a loop of its own: not innermost
            body = insns[s:e + 1]
            out.append(Loop(func, addrs[s], addrs[e], len(body),
                            sum(1 for _, op, _ in body if re.match(r"vf(n)?m(add|sub)", op)),
                            sum(1 for _, _, args in body if _STACK.search(args))))

    for line in disasm.splitlines():
        m = _FUNC.match(line)
        if m:
            flush()
            func, insns = m.group(1), []
            continue
        m = _INSN.match(line)
        if m and func is not None:
            insns.append((int(m.group(1), 16), m.group(2), m.group(3)))
    flush()
    return out


def violations(found, min_fma, max_stack):
    return [lp for lp in found if lp.fmas >= min_fma and lp.stack > max_stack]


def short(name, width=160):
    name = re.sub(r"detconv::cpu::\w+::", "", name)
    name = re.sub(r"detconv::(cpu::)?", "", name)
    return name if len(name) <= width else name[:width - 3] + "..."


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isa", nargs="+", default=["avx512", "avx2"], choices=sorted(UNIT_FLAGS))
    ap.add_argument("--min-fma", type=int, default=16)
    ap.add_argument("--max-stack", type=int, default=4)
    ap.add_argument("--show", type=int, default=10, help="loops listed per ISA, most stack accesses first")
    args = ap.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for isa in args.isa:
            objs = unit_objects(isa, tmp)
            print(f"{isa}: {', '.join(map(str, objs))}")
            found = [lp for lp in loops(disassemble(objs)) if lp.fmas >= args.min_fma]
            worst = sorted(found, key=lambda lp: (-lp.stack, -lp.fmas))
            v = violations(found, args.min_fma, args.max_stack)
            bad += len(v)
            print(f"{isa}: {len(found)} innermost loops with >= {args.min_fma} fmas, "
                  f"{len(v)} with more than {args.max_stack} stack accesses")
            for lp in worst[:args.show]:
                print(f"  stack {lp.stack:3d}  fma {lp.fmas:3d}  insns {lp.insns:4d}  {short(lp.function)} +{lp.start:#x}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
