#!/usr/bin/env python3
"""SASS audit of the CUDA kernels: numerics rules plus a static performance table.

Compiles every cuda/*.cu to a cubin per architecture with exactly the project's
numerics flags (see cmake/cuda.cmake), disassembles it with cuobjdump -sass and

1. audits every function's SASS against the determinism/numerics contract
   (rules below; any violation makes the exit code 1), and
2. prints a static performance table: registers, spills, static shared memory,
   threads per block (__launch_bounds__), theoretical occupancy, and the
   instruction mix of each kernel's main loop.

Usage:
    python scripts/sass_audit.py [--archs 80,90] [--jobs N] [--build DIR]
                                 [--src DIR] [--include DIR] [--filter REGEX]
                                 [--binary LIB.so] [--json FILE] [--markdown] [--no-table]

--binary audits the cubins a built library carries as well (the numerics rules
only), e.g. the installed kernel module: the test suite audits sm_90 there,
where the build already compiled it, and compiles only sm_80 itself.

Exit codes: 0 clean, 1 numerics violations, 2 compile/disassembly error,
77 toolchain missing (nvcc or its host C++ compiler, or cuobjdump + nvdisasm;
`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm` provides the latter two).

Numerics rules (function `audit_lines` / `audit_insns`; pure, no tools needed)
----------------------------------------------------------------------------
Data may only see FFMA/DFMA/HFMA2/FADD/DADD/HADD2 in round-to-nearest.
An instruction is a violation when it is

* a multiply: FMUL*, DMUL*, HMUL* (any variant, e.g. FMUL32I, HMUL2_32I);
* any opcode with a .FTZ modifier, except the integer-division idiom's
  F2I.FTZ...TRUNC (see below);
* MUFU of any kind (EX2, LG2, RSQ, SIN, SQRT, ... and RCP used for float
  division), except MUFU.RCP / MUFU.RCP64H inside the integer-division idiom;
* a floating-point atomic or reduction: RED/REDG/REDAS/ATOM/ATOMG/ATOMS whose
  modifiers name a float type or op (F16, F16x2, BF16, BF16x2, F32, F64, FADD,
  FMIN, FMAX, FTZ, RN).  Integer atomics are allowed but listed as notes;
* FADD/FFMA/DADD/DFMA/HADD2/HFMA2 (also the *32I and sm_100 *2 forms) with a
  rounding modifier other than round-to-nearest (.RZ, .RM, .RP);
* a tensor-core instruction: any opcode ending in MMA (HMMA, IMMA, DMMA, BMMA,
  HGMMA, IGMMA, QGMMA, ...).  HFMA2.MMA is *not* one: it is an ordinary HFMA2
  issued on the other FMA pipe (ptxas uses it to materialise constants).

The integer-division idiom (what ptxas emits for 32-bit and 64-bit integer
`/` and `%`) is recognised by register dataflow, not by position:

    I2F[.U32|.U64|.S64|...].RP  Ra, Rx        # int -> float, round up
    MUFU.RCP[64H]               Rb, Ra        # source produced by the I2F.RP
    IADD3/VIADD/IADD            Rc, Rb, imm   # e.g. 0xffffffe, 0x1ffffffe
    F2I[.FTZ].U32|U64.TRUNC...  Rd, Rc        # source is Rb or Rc

Each step must read a register written by the previous step at most
IDIOM_WINDOW (512) instructions earlier, with no other write to that register
in between.  Only MUFU.RCP/RCP64H and F2I.FTZ...TRUNC are excused by it.
"""

from __future__ import annotations

import argparse
import bisect
import concurrent.futures as cf
import dataclasses
import functools
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The project's numerics flags (cmake/cuda.cmake), plus -cubin/-arch/-I/-Xptxas -v.
NUMERICS_FLAGS = [
    "-std=c++17", "-O3", "--fmad=false", "--ftz=false", "--prec-div=true",
    "--prec-sqrt=true", "-Xcompiler=-ffp-contract=off,-fno-fast-math",
]

EXIT_VIOLATIONS = 1
EXIT_ERROR = 2
EXIT_SKIP = 77

# ptxas hoists divisions by kernel parameters and interleaves several of them:
# one step of the idiom was seen up to ~150 instructions after the previous one
# (CUDA 13, sm_80/90).  The register dataflow is the real check; this only
# bounds how long a mark lives.
IDIOM_WINDOW = 512


# --------------------------------------------------------------------------
# Tool discovery
# --------------------------------------------------------------------------

def _site_dirs() -> list[str]:
    dirs: list[str] = []
    for p in sys.path:
        if p and os.path.isdir(p):
            dirs.append(p)
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some virtualenv flavours
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    seen, out = set(), []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _executable(path) -> str | None:
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return str(path)
    return None


def find_nvcc() -> str | None:
    env = os.environ.get("CUDACXX")
    if env:
        found = _executable(env) or shutil.which(env)
        if found:
            return found
    return shutil.which("nvcc") or _executable("/usr/local/cuda/bin/nvcc")


def find_cuda_tool(name: str, nvcc: str | None) -> str | None:
    """`name` on PATH, beside nvcc (real toolkit dir too), or in a pip wheel."""
    found = shutil.which(name)
    if found:
        return found
    if nvcc:
        for d in {os.path.dirname(nvcc), os.path.dirname(os.path.realpath(nvcc))}:
            found = _executable(os.path.join(d, name)) or _executable(os.path.join(d, name + ".exe"))
            if found:
                return found
    subdirs = ["nvidia/cu13/bin", "nvidia/cu12/bin", f"nvidia/cuda_{name}/bin",
               "nvidia/cuda_cuobjdump/bin", "nvidia/cuda_nvdisasm/bin"]
    exe = name + ".exe" if os.name == "nt" else name
    for sp in _site_dirs():
        for sub in subdirs:
            found = _executable(os.path.join(sp, sub, exe))
            if found:
                return found
    return None


def tool_env(nvdisasm: str | None) -> dict:
    """Environment for cuobjdump: it runs nvdisasm for -sass."""
    env = dict(os.environ)
    if nvdisasm:
        d = os.path.dirname(nvdisasm)
        env["PATH"] = d + os.pathsep + env.get("PATH", "")
        env.setdefault("NVDISASM_PATH", d)
    return env


# --------------------------------------------------------------------------
# SASS parsing
# --------------------------------------------------------------------------

@dataclasses.dataclass
class Insn:
    index: int
    addr: int | None
    guard: str
    opcode: str            # full opcode with modifiers, e.g. F2I.FTZ.U32.TRUNC.NTZ
    base: str              # e.g. F2I
    mods: tuple[str, ...]  # e.g. ('FTZ', 'U32', 'TRUNC', 'NTZ')
    operands: list[str]
    text: str              # the instruction as printed (no encoding comment)
    target: str | None = None  # branch target: '0x1a0' or '.L_x_12'


_ENC_RE = re.compile(r"/\*\s*0x[0-9a-fA-F]+\s*\*/")
_ADDR_RE = re.compile(r"^/\*([0-9a-fA-F]+)\*/\s*")
_GUARD_RE = re.compile(r"^(@!?U?P[T0-9]+)\s+")
_LABEL_RE = re.compile(r"^\s*(\.L_x_\d+|\.L_\w+)\s*:")
_REG_RE = re.compile(r"^[-!~]?\|?(R\d+)(?:\.[A-Za-z0-9_]+)*\|?$")
_IMM_RE = re.compile(r"^-?0x[0-9a-fA-F]+$|^-?\d+$")
_ENC_ONLY_RE = re.compile(r"\s*(?:/\*\s*0x[0-9a-fA-F]+\s*\*/\s*)*")  # the second encoding word's line
_NESTED_COMMA_RE = re.compile(r"\[[^\]]*,|\([^)]*,")  # a comma inside [...] or (...)
_OPCODE_RE = re.compile(r"[A-Z][A-Z0-9_]*(\.[A-Za-z0-9_]+)*")
_TARGET_LABEL_RE = re.compile(r"\((\.L_\w+)\)")
_TARGET_ADDR_RE = re.compile(r"0x[0-9a-fA-F]+")
_BRANCHES = frozenset(("BRA", "CALL", "BSSY", "SSY", "PBK", "BRK", "JMP"))


def _split_operands(s: str) -> list[str]:
    if ("[" not in s and "(" not in s) or not _NESTED_COMMA_RE.search(s):  # no comma to skip
        out = [o.strip() for o in s.split(",")]
        if not out[-1]:
            out.pop()
        return out
    out, depth, cur = [], 0, []
    for c in s:
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


def parse_insns(lines) -> tuple[list[Insn], dict[str, int]]:
    """SASS lines (cuobjdump style, or bare 'OPC a, b ;' text, several per line
    allowed) -> instructions and label -> address map."""
    insns: list[Insn] = []
    labels: dict[str, int] = {}
    pending_labels: list[str] = []
    for raw in lines:
        if raw.lstrip().startswith("/* 0x") and _ENC_ONLY_RE.fullmatch(raw):
            continue
        line = _ENC_RE.sub("", raw) if "/*" in raw else raw
        m = _LABEL_RE.match(line)
        if m:
            pending_labels.append(m.group(1))
            line = line[m.end():]
        for piece in line.split(";"):
            piece = piece.strip().strip("{}").strip()
            if not piece:
                continue
            addr = None
            m = _ADDR_RE.match(piece)
            if m:
                addr = int(m.group(1), 16)
                piece = piece[m.end():]
            guard = ""
            m = _GUARD_RE.match(piece)
            if m:
                guard = m.group(1)
                piece = piece[m.end():]
            if not piece or not (piece[0].isalpha() and piece[0].isupper()):
                continue  # directives (.headerflags, .target), 'Function : ...'
            parts = piece.split(None, 1)
            opcode = parts[0]
            if not _OPCODE_RE.fullmatch(opcode):
                continue
            ops = _split_operands(parts[1]) if len(parts) > 1 else []
            base, *mods = opcode.split(".")
            if addr is None and insns and insns[-1].addr is not None:
                addr = insns[-1].addr + 16
            ins = Insn(len(insns), addr, guard, opcode, base, tuple(mods), ops,
                       (guard + " " if guard else "") + piece.strip())
            if base in _BRANCHES and ops:
                t = ops[-1]
                mm = _TARGET_LABEL_RE.search(t)
                if mm:
                    ins.target = mm.group(1)
                elif _TARGET_ADDR_RE.fullmatch(t):
                    ins.target = t
            for lab in pending_labels:
                if addr is not None:
                    labels[lab] = addr
            pending_labels = []
            insns.append(ins)
    return insns, labels


@functools.lru_cache(maxsize=1 << 16)  # operands repeat: R2, R3.reuse, ...
def _reg(op: str) -> str | None:
    m = _REG_RE.match(op.replace(".reuse", ""))
    if m and m.group(1) != "RZ":
        return m.group(1)
    return None


def _is_imm(op: str) -> bool:
    return bool(_IMM_RE.match(op))


@dataclasses.dataclass
class Violation:
    rule: str
    insn: str
    addr: int | None
    function: str = ""
    arch: str = ""
    src: str = ""

    def __str__(self):
        where = f"/*{self.addr:04x}*/ " if self.addr is not None else ""
        loc = f"{self.arch} {self.function}: " if self.function else ""
        return f"{loc}{where}{self.insn}  <- {self.rule}"


MUL_RE = re.compile(r"^(FMUL|DMUL|HMUL)")
ROUNDED_OPS = {"FADD", "FADD32I", "FFMA", "FFMA32I", "DADD", "DFMA", "HADD2",
               "HADD2_32I", "HFMA2", "HFMA2_32I", "FADD2", "FFMA2"}
ATOMIC_BASES = {"RED", "REDG", "REDAS", "ATOM", "ATOMG", "ATOMS", "ATOMAS"}
_IDIOM_BASES = frozenset(("I2F", "MUFU", "F2I", "IADD3", "VIADD", "IADD", "IADD32I"))  # audit_insns' dataflow
FLOAT_ATOMIC_MODS = {"F16", "F16X2", "BF16", "BF16X2", "BF16_V2", "F16_V2",
                     "F32", "F64", "FADD", "FMIN", "FMAX", "FTZ", "RN"}


def audit_insns(insns: list[Insn]):
    """-> (violations, notes).  Notes: integer atomics (allowed, reported)."""
    violations: list[Violation] = []
    notes: list[str] = []
    i2f: dict[str, int] = {}  # register -> index of the I2F.*.RP that wrote it
    rcp: dict[str, int] = {}  # ... of the idiom's MUFU.RCP
    adj: dict[str, int] = {}  # ... of the idiom's IADD3 Rb + imm

    def live(table, r, idx):
        return r is not None and r in table and idx - table[r] <= IDIOM_WINDOW

    for idx, ins in enumerate(insns):
        b, mods = ins.base, set(ins.mods)
        if not (idx & 255):  # entries past the window can no longer be live: drop them
            for table in (i2f, rcp, adj):
                for r in [r for r, at in table.items() if idx - at > IDIOM_WINDOW]:
                    del table[r]
        if b in _IDIOM_BASES or i2f or rcp or adj:
            dst = _reg(ins.operands[0]) if ins.operands else None
            srcs = [_reg(o) for o in ins.operands[1:]]
        else:  # no idiom in flight and none starting: the registers cannot matter
            dst, srcs = None, []
        src0 = srcs[0] if srcs else None
        reasons: list[str] = []
        mark = None  # (table, reg) set by this instruction

        if MUL_RE.match(b):
            reasons.append("multiply (only FFMA/DFMA/HFMA2/FADD/DADD/HADD2 may touch data)")

        if b == "MUFU":
            fn = ins.mods[0] if ins.mods else "?"
            if fn in ("RCP", "RCP64H") and live(i2f, src0, idx):
                mark = (rcp, dst)
            else:
                reasons.append(f"MUFU.{fn} outside the integer-division idiom")

        if "FTZ" in mods:
            if b == "F2I" and "TRUNC" in mods and (live(adj, src0, idx) or live(rcp, src0, idx)):
                pass  # integer-division idiom
            elif b in ATOMIC_BASES:
                pass  # reported as a float atomic below
            else:
                reasons.append(".FTZ modifier (subnormals flushed)")

        if b in ATOMIC_BASES:
            if {m.upper() for m in ins.mods} & FLOAT_ATOMIC_MODS:
                reasons.append("floating-point atomic/reduction (order-dependent)")
            else:
                notes.append(f"integer atomic: {ins.text}")

        if b in ROUNDED_OPS and mods & {"RZ", "RM", "RP"}:
            reasons.append("rounding mode other than round-to-nearest")

        if b.endswith("MMA"):
            reasons.append("tensor-core instruction")

        # idiom dataflow
        if b == "I2F" and "RP" in mods and dst:
            mark = (i2f, dst)
        elif b in ("IADD3", "VIADD", "IADD", "IADD32I") and dst and \
                any(live(rcp, s, idx) for s in srcs) and any(_is_imm(o) for o in ins.operands[1:]):
            mark = (adj, dst)
        if dst:
            for table in (i2f, rcp, adj):
                table.pop(dst, None)
        if mark and mark[1]:
            mark[0][mark[1]] = idx
            if mark[0] is i2f and ("F64" in mods):
                n = int(mark[1][1:]) + 1
                i2f[f"R{n}"] = idx

        if reasons:
            violations.append(Violation("; ".join(reasons), ins.text, ins.addr))
    return violations, notes


def audit_lines(lines) -> list[Violation]:
    """Pure rule check of SASS text lines (one function's body)."""
    insns, _ = parse_insns(lines)
    return audit_insns(insns)[0]


# --------------------------------------------------------------------------
# Loops and instruction mix
# --------------------------------------------------------------------------

FMA_OPS = {"FFMA", "FFMA32I", "DFMA", "HFMA2", "HFMA2_32I", "FFMA2"}
ADD_OPS = {"FADD", "FADD32I", "DADD", "HADD2", "HADD2_32I", "FADD2"}


def _is_fp_move(ins: Insn) -> bool:
    """HFMA2 -RZ, RZ, imm (constant) / HADD2.F32 -RZ, x (f16->f32 convert)."""
    if ins.base in ("HFMA2", "HADD2", "HFMA2_32I", "HADD2_32I") and len(ins.operands) > 1:
        return ins.operands[1].lstrip("-") == "RZ"
    return False


def fma_kind(ins: Insn) -> str | None:
    if ins.base in FMA_OPS and not _is_fp_move(ins):
        return "fma"
    if ins.base in ADD_OPS and not _is_fp_move(ins):
        return "add"
    return None


def find_loops(insns: list[Insn], labels: dict[str, int]) -> list[tuple[int, int]]:
    loops = []
    for ins in insns:
        if ins.base != "BRA" or ins.target is None or ins.addr is None:
            continue
        t = ins.target
        tgt = labels.get(t) if t.startswith(".L") else int(t, 16)
        if tgt is not None and tgt < ins.addr:  # == addr: the trailing 'BRA self' trap
            loops.append((tgt, ins.addr))
    return sorted(set(loops))


def loop_mix(insns: list[Insn], lo: int, hi: int, nested=()) -> dict:
    """Instruction mix of the loop body [lo, hi], less the nested loops' bodies."""
    body = [i for i in insns if i.addr is not None and lo <= i.addr <= hi
            and not any(a <= i.addr <= b for a, b in nested)]
    mix = Counter(i.opcode for i in body)
    fma = Counter()
    adds = 0
    lds = Counter()
    ldg = ldgsts = bar = local = 0
    for i in body:
        k = fma_kind(i)
        if k == "fma":
            fma[i.base] += 1
        elif k == "add":
            adds += 1
        if i.base == "LDS":
            w = "128" if "128" in i.mods else "64" if "64" in i.mods else "32"
            lds[w] += 1
        elif i.base == "LDSM":
            lds["ldsm"] += 1
        elif i.base == "LDG":
            ldg += 1
        elif i.base == "LDGSTS":
            ldgsts += 1
        elif i.base == "BAR":
            bar += 1
        elif i.base in ("LDL", "STL"):
            local += 1
    n_fma = sum(fma.values())
    lds_any = sum(lds.values())
    return {
        "start": lo, "end": hi, "insns": len(body),
        "fma": n_fma, "fma_by_op": dict(fma),
        "fma_lanes": n_fma + fma.get("HFMA2", 0) + fma.get("HFMA2_32I", 0),  # HFMA2 = 2 fmas
        "fp_adds": adds,
        "fma_share": (100.0 * n_fma / len(body)) if body else 0.0,
        "lds32": lds["32"], "lds64": lds["64"], "lds128": lds["128"], "ldsm": lds["ldsm"],
        "fma_per_lds128": (n_fma / lds["128"]) if lds["128"] else None,
        "fma_per_lds": (n_fma / lds_any) if lds_any else None,
        "ldg": ldg, "ldgsts": ldgsts, "bar": bar, "local": local,
        "mix": dict(mix.most_common()),
    }


def main_loop(insns: list[Insn], labels: dict[str, int]):
    """The loop whose own body does the most FP math (FFMA/DFMA/HFMA2/FADD/
    DADD/HADD2): each backward-branch range [target, branch] counts only the
    instructions outside the loops nested in it, so an outer tile loop does
    not count its inner loops' math, and an unrolled main step is not hidden
    behind a small tail loop nested in it (ties: the smaller loop).
    Returns (lo, hi, nested ranges) or None."""
    addrs = [i.addr for i in insns]
    fp_addrs = [addrs[n] for n, i in enumerate(insns) if i.addr is not None and fma_kind(i)]

    def fp_in(lo, hi):
        return bisect.bisect_right(fp_addrs, hi) - bisect.bisect_left(fp_addrs, lo)

    ranges = find_loops(insns, labels)
    best = None
    for lo, hi in ranges:
        inside = [(a, b) for a, b in ranges if (a, b) != (lo, hi) and lo <= a and b <= hi]
        # outermost of the nested ranges (their own nests are inside them)
        nested = [(a, b) for a, b in inside
                  if not any((c, d) != (a, b) and c <= a and b <= d for c, d in inside)]
        own = fp_in(lo, hi) - sum(fp_in(a, b) for a, b in nested)
        if own <= 0:
            continue
        key = (-own, hi - lo)
        if best is None or key < best[0]:
            best = (key, lo, hi, nested)
    return (best[1], best[2], best[3]) if best else None


# --------------------------------------------------------------------------
# ptxas -v, cuobjdump -elf, c++filt
# --------------------------------------------------------------------------

def parse_ptxas(text: str) -> dict[str, dict]:
    info: dict[str, dict] = {}
    cur = props = None
    for line in text.splitlines():
        m = re.search(r"Compiling (entry function|function) '([^']+)' for '(\w+)'", line)
        if m:
            cur = m.group(2)
            info.setdefault(cur, {})["entry"] = m.group(1) == "entry function"
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = m.group(1)
            info.setdefault(props, {})
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and props:
            info[props].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                               spill_loads=int(m.group(3)))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            d = info[cur]
            d["regs"] = int(m.group(1))
            mm = re.search(r"used (\d+) barriers", line)
            d["barriers"] = int(mm.group(1)) if mm else 0
            mm = re.search(r"(\d+) bytes smem", line)
            d["smem"] = int(mm.group(1)) if mm else 0
    return info


def parse_elf_threads(text: str) -> dict[str, int]:
    """cuobjdump -elf: per kernel EIATTR_MAX_THREADS (__launch_bounds__) or
    EIATTR_REQNTID, as x*y*z."""
    out: dict[str, int] = {}
    cur, attr = None, None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("."):  # a section header: .nv.info.<kernel>, .text.<kernel>, ...
            cur = s[len(".nv.info."):].split()[0] if s.startswith(".nv.info.") else None
            attr = None
            continue
        if cur is None:
            continue
        m = re.match(r"Attribute:\s*(\w+)", s)
        if m:
            attr = m.group(1)
            continue
        if attr in ("EIATTR_MAX_THREADS", "EIATTR_REQNTID") and s.startswith("Value:"):
            vals = [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", s)]
            if vals:
                n = 1
                for v in vals[:3]:
                    n *= max(v, 1)
                if attr == "EIATTR_REQNTID" or cur not in out:
                    out[cur] = n
            attr = None
    return out


def demangle(names: list[str]) -> dict[str, str]:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    try:
        r = subprocess.run([cxxfilt], input="\n".join(names) + "\n", capture_output=True,
                           text=True, timeout=60)
        dem = r.stdout.splitlines()
        if r.returncode == 0 and len(dem) == len(names):
            return dict(zip(names, dem))
    except (OSError, subprocess.SubprocessError):
        pass
    return {n: n for n in names}


def compact(name: str, width: int = 90) -> str:
    s = re.sub(r"^void ", "", name)
    depth = 0
    for i, c in enumerate(s):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and i > 0:
            s = s[:i]
            break
    s = s.replace("detconv::gpu::", "").replace("detconv::", "")
    s = re.sub(r"\s+>", ">", s)
    if len(s) > width:
        s = s[:width - 3] + "..."
    return s


# --------------------------------------------------------------------------
# Occupancy
# --------------------------------------------------------------------------

ARCH_LIMITS = {
    # regs/SM, smem/SM, max smem/block, threads/SM, blocks/SM
    75: (65536, 64 * 1024, 64 * 1024, 1024, 16),
    80: (65536, 164 * 1024, 163 * 1024, 2048, 32),
    86: (65536, 100 * 1024, 99 * 1024, 1536, 16),
    87: (65536, 164 * 1024, 163 * 1024, 2048, 32),
    89: (65536, 100 * 1024, 99 * 1024, 1536, 24),
    90: (65536, 228 * 1024, 227 * 1024, 2048, 32),
    100: (65536, 228 * 1024, 227 * 1024, 2048, 32),
}


def occupancy(arch, regs: int, smem: int, threads: int) -> dict:
    """Theoretical occupancy as cuda_occupancy.h computes it (static smem only,
    +1 KiB system-reserved smem per block, 4 register sub-partitions,
    256-register allocation unit per warp = regs/thread rounded up to 8)."""
    arch = int(re.match(r"\d+", str(arch)).group())
    regs_sm, smem_sm, smem_blk, thr_sm, blk_sm = ARCH_LIMITS.get(arch, ARCH_LIMITS[80])
    max_warps = thr_sm // 32
    wpb = -(-threads // 32)
    lim_warps = max_warps // wpb if wpb else 0
    regs_warp = -(-max(regs, 1) * 32 // 256) * 256
    lim_regs = ((regs_sm // 4) // regs_warp * 4) // wpb if regs <= 255 else 0
    smem_alloc = -(-(smem + 1024) // 128) * 128
    lim_smem = 0 if smem > smem_blk else smem_sm // smem_alloc
    blocks = min(lim_warps, lim_regs, lim_smem, blk_sm)
    limits = {"warps": lim_warps, "regs": lim_regs, "smem": lim_smem, "blocks": blk_sm}
    by = sorted(k for k, v in limits.items() if v == blocks)
    return {"blocks": blocks, "warps": blocks * wpb, "max_warps": max_warps,
            "occupancy": blocks * wpb / max_warps, "limited_by": by}


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

def log(msg: str):
    print(msg, file=sys.stderr, flush=True)


def run_nvcc(nvcc, src: Path, arch: int, include: Path, out: Path):
    cmd = [nvcc, "-cubin", f"-arch=sm_{arch}", *NUMERICS_FLAGS, "-I", str(include),
           "-Xptxas", "-v", "-o", str(out), str(src)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r, time.time() - t0, cmd


def probe_disassembler(nvcc, cuobjdump, env, arch, tmp: Path):
    """cuobjdump -sass needs nvdisasm; try it on a tiny kernel up front."""
    cu = tmp / "_probe.cu"
    cu.write_text("__global__ void probe(float* p) { p[0] = 1.0f; }\n")
    cubin = tmp / "_probe.cubin"
    r = subprocess.run([nvcc, "-cubin", f"-arch=sm_{arch}", "-o", str(cubin), str(cu)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        log(r.stderr)
        if "Failed to preprocess host compiler properties" in r.stderr or not any(
                shutil.which(c) for c in ("gcc", "g++", "cc", "c++", "clang++")):
            # nvcc needs a host C++ compiler even for device code (e.g. a wheel installed without one)
            print("sass_audit: skipped: nvcc has no host C++ compiler on PATH")
            sys.exit(EXIT_SKIP)
        print(f"sass_audit: nvcc cannot compile a trivial kernel for sm_{arch}")
        sys.exit(EXIT_ERROR)
    r = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env)
    if r.returncode != 0 or "Function : " not in r.stdout:
        msg = (r.stderr.strip().splitlines() or ["no SASS printed"])[-1]
        if "nvdisasm" in r.stderr:
            print(f"sass_audit: skipped: cuobjdump -sass needs nvdisasm ({msg}); "
                  "pip install nvidia-cuda-nvdisasm")
            sys.exit(EXIT_SKIP)
        print(f"sass_audit: cuobjdump -sass failed: {msg}")
        sys.exit(EXIT_ERROR)


_FUNCTION_RE = re.compile(r"\s*Function : (\S+)")


def split_functions(sass: str) -> list[tuple[str, list[str]]]:
    funcs: list[tuple[str, list[str]]] = []
    cur: list[str] | None = None
    for line in sass.splitlines():
        m = _FUNCTION_RE.match(line) if "Function : " in line else None
        if m:
            cur = []
            funcs.append((m.group(1), cur))
        elif cur is not None:
            cur.append(line)
    return funcs


def analyse_cubin(cuobjdump, env, cubin: Path):
    r = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump -sass {cubin.name}: {r.stderr.strip()}")
    e = subprocess.run([cuobjdump, "-elf", str(cubin)], capture_output=True, text=True, env=env)
    threads = parse_elf_threads(e.stdout) if e.returncode == 0 else {}
    return analyse_sass(r.stdout, threads)


def extract_cubins(cuobjdump, env, path: Path, out: Path) -> list[tuple[str, Path]]:
    """The cubins a built library carries (e.g. detconv/_kernels*.so: what ships,
    compiled by the project's own build), extracted into `out`, with their architectures."""
    out.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([cuobjdump, "-xelf", "all", str(path.resolve())], capture_output=True, text=True,
                       env=env, cwd=out)
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump -xelf {path.name}: {r.stderr.strip()}")
    found = []
    for name in re.findall(r"Extracting ELF file\s+\d+:\s+(\S+)", r.stdout):
        m = re.search(r"\.sm_(\d+[af]?)\.cubin$", name)
        if m:
            found.append((m.group(1), out / name))
    return found


def analyse_sass(sass: str, threads: dict[str, int]) -> list[dict]:
    out = []
    for name, lines in split_functions(sass):
        insns, labels = parse_insns(lines)
        viol, notes = audit_insns(insns)
        ml = main_loop(insns, labels)
        out.append({
            "mangled": name, "n_insns": len(insns), "violations": viol, "notes": notes,
            "n_loops": len(find_loops(insns, labels)),
            "main_loop": loop_mix(insns, *ml) if ml else None,
            "threads": threads.get(name),
        })
    return out


def fmt_ratio(x):
    return "-" if x is None else f"{x:.1f}"


TABLE_COLS = ["kernel", "src", "regs", "stack", "spill st/ld", "smem", "thr", "occ",
              "loop", "FMA", "ADD", "FMA%", "LDS 32/64/128", "FMA/LDS128", "FMA/LDS",
              "LDG", "LDGSTS", "BAR", "LDL+STL"]


def table_rows(funcs):
    rows = []
    for f in funcs:
        ml = f["main_loop"]
        occ = f["occupancy"]
        row = [f["name"], f["src"], str(f.get("regs", "?")), str(f.get("stack", "?")),
               f"{f.get('spill_stores', '?')}/{f.get('spill_loads', '?')}",
               str(f.get("smem", "?")),
               f"{f['threads']}" + ("" if f["threads_from"] == "elf" else "*"),
               f"{100 * occ['occupancy']:.0f}%" if occ else "?"]
        if ml:
            row += [str(ml["insns"]), str(ml["fma"]), str(ml["fp_adds"]), f"{ml['fma_share']:.0f}%",
                    f"{ml['lds32']}/{ml['lds64']}/{ml['lds128']}",
                    fmt_ratio(ml["fma_per_lds128"]), fmt_ratio(ml["fma_per_lds"]),
                    str(ml["ldg"]), str(ml["ldgsts"]), str(ml["bar"]), str(ml["local"])]
        else:
            row += ["-"] * 11
        rows.append(row)
    return rows


def print_table(arch, funcs, markdown: bool):
    rows = table_rows(funcs)
    print()
    print(f"{'### ' if markdown else ''}sm_{arch}: static performance "
          f"(main loop = the loop whose own body, nested loops excluded, has the most FP math)")
    if markdown:
        print()
        print("| " + " | ".join(TABLE_COLS) + " |")
        print("|" + "|".join("---" if i < 2 else "--:" for i in range(len(TABLE_COLS))) + "|")
        for r in rows:
            print("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    else:
        widths = [max(len(TABLE_COLS[i]), *(len(r[i]) for r in rows)) if rows else len(TABLE_COLS[i])
                  for i in range(len(TABLE_COLS))]

        def line(cells):
            return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        print(line(TABLE_COLS))
        print(line(["-" * w for w in widths]))
        for r in rows:
            print(line(r))
    if any(f["threads_from"] != "elf" for f in funcs):
        print("(* threads per block not found in the cubin: --threads-default used)")
    print("FMA: FFMA/DFMA/HFMA2 instructions (an HFMA2 is 2 fmas); ADD: FADD/DADD/HADD2; "
          "LDS 32 includes narrower loads; occ: theoretical, static smem only.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", default="80,90", help="comma-separated SM versions (default 80,90)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--build", help="directory for cubins and ptxas logs (default: a temp dir)")
    ap.add_argument("--src", default=str(REPO / "cuda"), help="directory of the .cu files")
    ap.add_argument("--include", default=str(REPO / "csrc"), help="include directory (-I)")
    ap.add_argument("--filter", help="only functions whose (demangled or mangled) name matches")
    ap.add_argument("--json", help="write everything to this JSON file")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--table", dest="table", action="store_true", default=True,
                    help="print the performance table (default)")
    ap.add_argument("--no-table", dest="table", action="store_false")
    ap.add_argument("--binary", action="append", default=[],
                    help="also audit the SASS embedded in this built library (every architecture it "
                         "carries; repeatable), e.g. the installed detconv/_kernels*.so")
    ap.add_argument("--threads-default", type=int, default=256,
                    help="threads per block when the cubin has no __launch_bounds__")
    args = ap.parse_args(argv)
    t_start = time.time()

    archs = [a.strip().removeprefix("sm_") for a in args.archs.split(",") if a.strip()]
    bad = [a for a in archs if not re.fullmatch(r"\d+[af]?", a)]
    if bad or not archs:
        print(f"sass_audit: bad --archs {args.archs!r} (want e.g. 80,90 or 90a)")
        return EXIT_ERROR
    nvcc = find_nvcc()
    if not nvcc:
        print("sass_audit: skipped: nvcc not found (PATH or $CUDACXX)")
        return EXIT_SKIP
    cuobjdump = find_cuda_tool("cuobjdump", nvcc)
    if not cuobjdump:
        print("sass_audit: skipped: cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
        return EXIT_SKIP
    nvdisasm = find_cuda_tool("nvdisasm", nvcc)
    env = tool_env(nvdisasm)
    log(f"sass_audit: nvcc={nvcc} cuobjdump={cuobjdump} nvdisasm={nvdisasm or '-'}")

    src_dir, inc_dir = Path(args.src).resolve(), Path(args.include).resolve()
    sources = sorted(src_dir.glob("*.cu"))
    if not sources:
        print(f"sass_audit: no .cu files in {src_dir}")
        return EXIT_ERROR
    rx = re.compile(args.filter) if args.filter else None

    tmp_ctx = tempfile.TemporaryDirectory(prefix="sass_audit_") if not args.build else None
    build = Path(args.build) if args.build else Path(tmp_ctx.name)
    build.mkdir(parents=True, exist_ok=True)
    bin_pool = None
    try:
        probe_disassembler(nvcc, cuobjdump, env, archs[0], build)

        # built libraries: their cubins are analysed alongside the compiles below
        shipped: dict[Path, list[tuple[str, Path]]] = {}
        for i, b in enumerate(map(Path, args.binary)):
            try:
                shipped[b] = extract_cubins(cuobjdump, env, b, build / f"binary{i}")
            except RuntimeError as e:
                print(f"sass_audit: {e}")
                return EXIT_ERROR
            if not shipped[b]:
                print(f"sass_audit: {b} carries no SASS")
                return EXIT_ERROR
        bin_pool = cf.ThreadPoolExecutor(max_workers=1)  # one: the compiles have the other cores
        bin_futs = {(b, a, c): bin_pool.submit(analyse_cubin, cuobjdump, env, c)
                    for b, cubins in shipped.items() for a, c in cubins}

        # compile
        tasks = [(s, a) for a in archs for s in sources]
        log(f"sass_audit: compiling {len(sources)} files x {len(archs)} archs, {args.jobs} jobs")
        ptx: dict[tuple[str, int], dict] = {}
        failed = False
        with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = {ex.submit(run_nvcc, nvcc, s, a, inc_dir, build / f"{s.stem}.sm_{a}.cubin"): (s, a)
                    for s, a in tasks}
            for n, fut in enumerate(cf.as_completed(futs), 1):
                s, a = futs[fut]
                r, dt, cmd = fut.result()
                (build / f"{s.stem}.sm_{a}.ptxas.log").write_text(r.stderr)
                if r.returncode != 0:
                    failed = True
                    err = r.stderr.splitlines()
                    more = f"\n... ({len(err) - 60} more lines)" if len(err) > 60 else ""
                    log(f"[{n}/{len(tasks)}] FAILED {s.name} sm_{a}: {' '.join(cmd)}\n"
                        + "\n".join(err[:60]) + more)
                else:
                    log(f"[{n}/{len(tasks)}] {s.name} sm_{a} ({dt:.1f} s)")
                    ptx[(s.name, a)] = parse_ptxas(r.stderr)
        if failed:
            print("sass_audit: compilation failed")
            return EXIT_ERROR

        # disassemble + analyse
        results: dict[tuple[str, int], list] = {}
        with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = {ex.submit(analyse_cubin, cuobjdump, env, build / f"{s.stem}.sm_{a}.cubin"): (s, a)
                    for s, a in tasks}
            for fut in cf.as_completed(futs):
                s, a = futs[fut]
                try:
                    results[(s.name, a)] = fut.result()
                except RuntimeError as e:
                    print(f"sass_audit: {e}")
                    return EXIT_ERROR
        binaries: dict[Path, dict[str, list]] = {}
        for (b, a, c), fut in bin_futs.items():
            try:
                binaries.setdefault(b, {}).setdefault(a, []).extend(fut.result())
            except RuntimeError as e:
                print(f"sass_audit: {e}")
                return EXIT_ERROR
        bin_pool.shutdown()
        log(f"sass_audit: disassembled and analysed ({time.time() - t_start:.1f} s)")

        names = sorted({f["mangled"] for fs in results.values() for f in fs}
                       | {f["mangled"] for per in binaries.values() for fs in per.values() for f in fs})
        dem = demangle(names)

        all_funcs, all_viol = [], []

        def selected(fs):
            """(function, demangled name) of the functions that --filter keeps."""
            for f in fs:
                full = dem.get(f["mangled"], f["mangled"])
                if not rx or rx.search(full) or rx.search(f["mangled"]):
                    yield f, full

        def take_violations(f, function: str, arch: int, src: str) -> int:
            """Labels f's violations with where they are, adds them to the report; -> how many."""
            for v in f["violations"]:
                v.function, v.arch, v.src = function, f"sm_{arch}", src
            all_viol.extend(f["violations"])
            return len(f["violations"])

        for a in archs:
            for s in sources:
                pinfo = ptx[(s.name, a)]
                for f, full in selected(results[(s.name, a)]):
                    p = pinfo.get(f["mangled"], {})
                    thr = f["threads"] or args.threads_default
                    rec = {
                        "src": s.name, "arch": a, "mangled": f["mangled"], "demangled": full,
                        "name": compact(full), "entry": p.get("entry", None),
                        "regs": p.get("regs"), "stack": p.get("stack"),
                        "spill_stores": p.get("spill_stores"), "spill_loads": p.get("spill_loads"),
                        "smem": p.get("smem"), "barriers": p.get("barriers"),
                        "threads": thr, "threads_from": "elf" if f["threads"] else "default",
                        "occupancy": occupancy(a, p["regs"], p.get("smem", 0), thr)
                        if p.get("regs") is not None else None,
                        "n_insns": f["n_insns"], "n_loops": f["n_loops"],
                        "main_loop": f["main_loop"], "notes": f["notes"],
                    }
                    take_violations(f, rec["name"], a, s.name)
                    rec["violations"] = [dataclasses.asdict(v) for v in f["violations"]]
                    all_funcs.append(rec)

        # built libraries: the numerics rules only (ptxas' resource report is not in a binary)
        bin_lines = []
        for b, per in binaries.items():
            for a, fs in sorted(per.items()):
                kept = list(selected(fs))
                nv = sum(take_violations(f, compact(full), a, b.name) for f, full in kept)
                n_insns = sum(f["n_insns"] for f, _ in kept)
                bin_lines.append(f"audit sm_{a} of {b.name}: {len(kept)} functions, {n_insns} instructions, "
                                 f"{nv} violations")

        # report
        if all_viol:
            print(f"VIOLATIONS ({len(all_viol)}):")
            shown = Counter()
            for v in all_viol:
                key = (v.arch, v.function)
                shown[key] += 1
                if shown[key] <= 10:
                    print(f"  {v.src} {v}")
            for key, n in shown.items():
                if n > 10:
                    print(f"  ... {key[0]} {key[1]}: {n - 10} more")
        notes = [(f, n) for f in all_funcs for n in f["notes"]]
        if notes:
            print(f"notes ({len(notes)}):")
            for f, n in notes[:20]:
                print(f"  sm_{f['arch']} {f['name']}: {n}")
        for a in archs:
            fs = [f for f in all_funcs if f["arch"] == a]
            nv = sum(len(f["violations"]) for f in fs)
            print(f"audit sm_{a}: {len(fs)} functions, {sum(f['n_insns'] for f in fs)} instructions, "
                  f"{nv} violations")
        for line in bin_lines:
            print(line)

        if args.table:
            for a in archs:
                print_table(a, [f for f in all_funcs if f["arch"] == a and f["entry"] is not False],
                            args.markdown)

        elapsed = time.time() - t_start
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"tools": {"nvcc": nvcc, "cuobjdump": cuobjdump, "nvdisasm": nvdisasm},
                           "flags": NUMERICS_FLAGS, "archs": archs, "src": str(src_dir),
                           "seconds": round(elapsed, 1), "functions": all_funcs,
                           "violations": [dataclasses.asdict(v) for v in all_viol],
                           "binaries": {str(b): {a: sorted(f["mangled"] for f in fs) for a, fs in per.items()}
                                        for b, per in binaries.items()}},
                          fh, indent=1)
        log(f"sass_audit: done in {elapsed:.1f} s")
        return EXIT_VIOLATIONS if all_viol else 0
    finally:
        if bin_pool:
            bin_pool.shutdown(cancel_futures=True)
        if tmp_ctx:
            tmp_ctx.cleanup()


if __name__ == "__main__":
    sys.exit(main())
