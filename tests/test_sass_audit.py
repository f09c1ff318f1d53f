"""scripts/sass_audit.py: the numerics rules on synthetic SASS (fast, no tools),
and the full audit of cuda/*.cu for sm_80 and sm_90 (sm_90 read from the
installed kernel module when its build carries it; needs nvcc and
cuobjdump + nvdisasm, e.g. from the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels; skips without them, or with
DETCONV_SKIP_SASS_AUDIT=1)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "sass_audit.py"
sa = load_script("sass_audit.py", "detconv_sass_audit")


def flagged(*lines):
    return sa.audit_lines(list(lines))


# -- rules -----------------------------------------------------------------

@pytest.mark.parametrize("line", [
    "FFMA R1, R2, R3, R4 ;",
    "FADD R1, R2, -R3 ;",
    "DFMA R4, R6, R8, R4 ;",
    "DADD R4, R6, R8 ;",
    "HFMA2 R8, R20, R3.reuse.H0_H0, R7 ;",
    "HFMA2.MMA R5, -RZ, RZ, 0, 0 ;",           # constant materialisation, not a tensor core
    "HADD2.F32 R53, -RZ, R40.H0_H0 ;",
    "FFMA.RN R1, R2, R3, R4 ;",
    "IMAD R1, R2, R3, R4 ;",
    "F2I.U32.TRUNC.NTZ R1, R2 ;",              # no FTZ: fine
    "FSETP.NAN.AND P0, PT, R1, R1, PT ;",
    "ATOM.E.ADD.STRONG.GPU PT, R2, [R4.64], R5 ;",   # integer atomic: allowed
])
def test_allowed(line):
    assert flagged(line) == []


@pytest.mark.parametrize("line", [
    "FMUL R1, R2, R3 ;",
    "FMUL.FTZ R1, R2, R3 ;",
    "FMUL32I R1, R2, 0x3f000000 ;",
    "DMUL R4, R6, R8 ;",
    "HMUL2 R1, R2, R3 ;",
    "HMUL2.BF16_V2 R1, R2, R3 ;",
    "FADD.FTZ R1, R2, R3 ;",
    "FFMA.FTZ R1, R2, R3, R4 ;",
    "FFMA.RZ R1, R2, R3, R4 ;",
    "FADD.RM R1, R2, R3 ;",
    "DADD.RP R4, R6, R8 ;",
    "HFMA2.RZ R1, R2, R3, R4 ;",
    "MUFU.EX2 R1, R2 ;",
    "MUFU.RSQ R1, R2 ;",
    "MUFU.RCP R1, R2 ;",                       # float division: not the idiom
    "F2I.FTZ.U32.TRUNC.NTZ R7, R6 ;",          # no I2F.RP/MUFU.RCP chain
    "ATOM.E.ADD.F32.FTZ.RN.STRONG.GPU PT, R2, [R4.64], R5 ;",
    "RED.E.ADD.F32.FTZ.RN.STRONG.GPU [R2.64], R5 ;",
    "RED.E.ADD.F64.RN.STRONG.GPU [R2.64], R4 ;",
    "ATOMS.ADD.F16x2.RN R1, [R2], R3 ;",
    "HMMA.16816.F32 R4, R8, R12, R4 ;",
    "IMMA.16832.S8.S8 R4, R8, R12, R4 ;",
    "DMMA.884 R4, R8, R12, R4 ;",
    "HGMMA.64x64x16.F32 R24, gdesc[UR4], R24 ;",
    "@P0 FMUL R1, R2, R3 ;",
    "/*0a30*/   @!P1 MUFU.LG2 R3, R4 ;   /* 0x0000000400037308 */",
])
def test_flagged(line):
    v = flagged(line)
    assert len(v) == 1, line
    assert v[0].rule


def test_integer_division_idiom_allowed():
    # 32-bit idiom, as one line and as separate lines with other work interleaved
    assert flagged("I2F.U32.RP R5, R4 ; MUFU.RCP R5, R5 ; IADD3 R6, R5, 0xffffffe, RZ ; "
                   "F2I.FTZ.U32.TRUNC.NTZ R7, R6 ;") == []
    assert flagged(
        "/*6d10*/ I2F.RP R38, R45 ;",
        "/*6d20*/ LOP3.LUT R50, RZ, R26, RZ, 0x33, !PT ;",
        "/*6d30*/ IADD3 R49, RZ, -R47, RZ ;",
        "/*6d50*/ MUFU.RCP R38, R38 ;",
        "/*6d60*/ IADD3 R40, R38, 0xffffffe, RZ ;",
        "/*6d70*/ IMAD.MOV R48, RZ, RZ, -R51 ;",
        "/*6d80*/ F2I.FTZ.U32.TRUNC.NTZ R41, R40 ;",
    ) == []
    # 64-bit idiom (sm_80/sm_90 __internal 64-bit division)
    assert flagged("I2F.U64.RP R38, R26 ;", "MUFU.RCP R38, R38 ;",
                   "IADD3 R38, R38, 0x1ffffffe, RZ ;", "F2I.U64.TRUNC R38, R38 ;") == []


def test_integer_division_idiom_broken_chains_flagged():
    # the reciprocal's input was overwritten between the I2F.RP and the MUFU
    v = flagged("I2F.U32.RP R5, R4 ;", "FADD R5, R1, R2 ;", "MUFU.RCP R5, R5 ;")
    assert [x.insn for x in v] == ["MUFU.RCP R5, R5"]
    # a MUFU.RCP not fed by the I2F.RP
    v = flagged("I2F.U32.RP R5, R4 ;", "MUFU.RCP R6, R7 ;")
    assert [x.insn for x in v] == ["MUFU.RCP R6, R7"]
    # too far apart
    filler = ["IADD3 R9, R9, 0x1, RZ ;"] * (sa.IDIOM_WINDOW + 1)
    v = flagged("I2F.U32.RP R5, R4 ;", *filler, "MUFU.RCP R5, R5 ;")
    assert len(v) == 1
    # F2I.FTZ whose input is not the idiom's reciprocal
    v = flagged("I2F.U32.RP R5, R4 ;", "MUFU.RCP R5, R5 ;", "IADD3 R6, R5, 0xffffffe, RZ ;",
                "F2I.FTZ.U32.TRUNC.NTZ R7, R8 ;")
    assert [x.insn for x in v] == ["F2I.FTZ.U32.TRUNC.NTZ R7, R8"]


def test_violation_reports_instruction_and_address():
    v = flagged("        /*0150*/                   FMUL R1, R2, R3 ;   /* 0x0000000302017220 */")
    assert v[0].addr == 0x150 and v[0].insn == "FMUL R1, R2, R3"
    assert "multiply" in v[0].rule


# -- loops, occupancy ------------------------------------------------------

def test_main_loop_is_the_loop_with_most_own_fp_math():
    lines = [
        "/*0000*/ MOV R1, RZ ;",
        "/*0010*/ LDS.128 R4, [R2] ;",          # outer loop starts here
        "/*0020*/ FFMA R8, R4, R5, R8 ;",
        "/*0030*/ LDS R6, [R3] ;",             # inner loop starts here
        "/*0040*/ FFMA R8, R6, R6, R8 ;",
        "/*0050*/ FFMA R9, R6, R7, R9 ;",
        "/*0060*/ @P0 BRA 0x30 ;",
        "/*0070*/ BAR.SYNC.DEFER_BLOCKING 0x0 ;",
        "/*0080*/ @P1 BRA 0x10 ;",
        "/*0090*/ EXIT ;",
        "/*00a0*/ BRA 0xa0 ;",                 # trailing self-loop: not a loop
    ]
    insns, labels = sa.parse_insns(lines)
    assert sa.find_loops(insns, labels) == [(0x10, 0x80), (0x30, 0x60)]
    lo, hi, nested = sa.main_loop(insns, labels)
    assert (lo, hi, nested) == (0x30, 0x60, [])  # 2 own FFMAs beat the outer loop's 1
    mix = sa.loop_mix(insns, lo, hi, nested)
    assert mix["insns"] == 4 and mix["fma"] == 2 and mix["lds32"] == 1 and mix["lds128"] == 0


def test_main_loop_excludes_a_nested_tail_loop():
    # an unrolled main step (3 FFMA) with a short tail loop (1 FFMA) nested in it
    lines = [
        "/*0000*/ MOV R1, RZ ;",
        "/*0010*/ FFMA R8, R4, R5, R8 ;",      # outer loop: its own body has 3 FFMA
        "/*0020*/ FFMA R9, R4, R5, R9 ;",
        "/*0030*/ FFMA R10, R4, R5, R10 ;",
        "/*0040*/ FFMA R11, R6, R7, R11 ;",     # tail loop
        "/*0050*/ @P0 BRA 0x40 ;",
        "/*0060*/ @P1 BRA 0x10 ;",
        "/*0070*/ EXIT ;",
    ]
    insns, labels = sa.parse_insns(lines)
    lo, hi, nested = sa.main_loop(insns, labels)
    assert (lo, hi, nested) == (0x10, 0x60, [(0x40, 0x50)])
    mix = sa.loop_mix(insns, lo, hi, nested)
    assert mix["insns"] == 4 and mix["fma"] == 3


def test_labels_as_branch_targets():
    lines = [".L_x_3:", "/*0100*/ FFMA R1, R2, R3, R1 ;", "/*0110*/ @P0 BRA `(.L_x_3) ;"]
    insns, labels = sa.parse_insns(lines)
    assert labels[".L_x_3"] == 0x100
    assert sa.main_loop(insns, labels) == (0x100, 0x110, [])


def test_occupancy():
    # 64 regs x 256 threads on sm_80: 2048 regs/warp, 8 warps/partition -> 32 warps = 50%
    o = sa.occupancy(80, 64, 0, 256)
    assert o["warps"] == 32 and o["occupancy"] == 0.5
    # 32 regs: thread limited, 100%
    assert sa.occupancy(90, 32, 0, 256)["occupancy"] == 1.0
    # 40 regs x 128 threads: 1280 regs/warp -> 12 warps/partition -> 48 warps
    assert sa.occupancy(90, 40, 16768, 128)["warps"] == 48
    # shared memory: 100 KiB static blocks -> 1 per SM on sm_80, 2 on sm_90
    assert sa.occupancy(80, 32, 100 * 1024, 256)["blocks"] == 1
    assert sa.occupancy(90, 32, 100 * 1024, 256)["blocks"] == 2


def test_parse_ptxas():
    log = """ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'
ptxas info    : Function properties for _Z1kPf
    32 bytes stack frame, 40 bytes spill stores, 652 bytes spill loads
ptxas info    : Used 80 registers, used 1 barriers, 32 bytes cumulative stack size, 22848 bytes smem
"""
    d = sa.parse_ptxas(log)["_Z1kPf"]
    assert d == {"entry": True, "stack": 32, "spill_stores": 40, "spill_loads": 652,
                 "regs": 80, "barriers": 1, "smem": 22848}


# -- the real kernels ------------------------------------------------------

def _shipped_sm90():
    """The installed kernel module when its build carries sm_90 SASS (CI builds exactly that):
    the audit then reads sm_90 from what ships instead of compiling it a second time."""
    from detconv import _loader
    info = _loader.build_info()
    if not info.get("cuda") or not any(a in ("90", "90-real") for a in info.get("cuda_archs", [])):
        return None
    spec = importlib.util.find_spec("detconv._kernels")
    return spec.origin if spec and spec.origin else None


@pytest.mark.long
def test_sass_audit_kernels(tmp_path):
    if os.environ.get("DETCONV_SKIP_SASS_AUDIT") == "1":
        pytest.skip("DETCONV_SKIP_SASS_AUDIT=1")
    shipped = _shipped_sm90()
    archs = ["80"] if shipped else ["80", "90"]
    report = tmp_path / "audit.json"
    cmd = [sys.executable, str(SCRIPT), "--archs", ",".join(archs), "--no-table", "--json", str(report)]
    if shipped:
        cmd += ["--binary", shipped]
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    except subprocess.TimeoutExpired:
        pytest.fail("sass_audit.py took longer than 1500 s")
    if r.returncode == 77:
        pytest.skip(r.stdout.strip() or "nvcc/cuobjdump not available")
    assert r.returncode == 0, f"sass_audit failed (rc={r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    for a in archs:
        line = [ln for ln in r.stdout.splitlines() if ln.startswith(f"audit sm_{a}:")]
        assert line and line[0].endswith(" 0 violations"), r.stdout
    if shipped:
        line = [ln for ln in r.stdout.splitlines() if ln.startswith(f"audit sm_90 of {Path(shipped).name}:")]
        assert line and line[0].endswith(" 0 violations"), r.stdout
        data = json.loads(report.read_text())
        compiled = {f["mangled"] for f in data["functions"] if f["arch"] == "80"}
        # the module carries every kernel of cuda/*.cu and nothing else: it was built from these sources
        assert set(data["binaries"][shipped]["90"]) == compiled, (
            f"{shipped} holds other kernels than cuda/*.cu compiles to: rebuild it (pip install .)")
