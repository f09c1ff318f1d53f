"""The test tables, in one place: numerics (dtype, accumulation) and convolution cases for 2-D and 3-D.
Every test module that sweeps them imports them from here."""

# (input dtype, accumulation): every numerics mode the contract defines
DTYPES = [("float32", None), ("float64", None), ("float16", None), ("float16", "float16"), ("bfloat16", None)]
DTYPE_IDS = [f"{d}-{a or 'default'}" for d, a in DTYPES]

# (name, x shape NHWC, filter HWIO, strides, dilations, padding (reference form))
CASES_2D = [
    ("3x3-same", (2, 7, 8, 5), (3, 3, 5, 6), 1, 1, "SAME"),
    ("3x3-valid-s2", (2, 9, 8, 4), (3, 3, 4, 7), 2, 1, "VALID"),
    ("5x3-s21-d12", (1, 11, 10, 3), (5, 3, 3, 4), (2, 1), (1, 2), "SAME"),
    ("dil2-s2", (2, 10, 9, 4), (3, 3, 4, 5), 2, 2, "SAME"),
    ("explicit", (2, 6, 7, 3), (3, 2, 3, 4), (1, 2), 1, ((1, 2), (0, 3))),
    ("groups2", (2, 6, 6, 8), (3, 3, 4, 6), 1, 1, "SAME"),
    ("groups4-s2", (1, 9, 7, 8), (2, 3, 2, 12), 2, 1, ((0, 1), (2, 0))),
    ("groups-lanes", (2, 6, 7, 16), (3, 3, 4, 16), 1, 1, "SAME"),  # lanes across groups (4 + 4 per group)
    ("depthwise", (2, 8, 7, 6), (3, 3, 1, 6), 1, 1, "SAME"),
    ("depthwise-m3-s2", (2, 9, 9, 4), (3, 3, 1, 12), 2, 1, "SAME"),
    ("depthwise-d2", (1, 9, 10, 5), (3, 3, 1, 5), 1, 2, "VALID"),
    ("1x1", (2, 5, 5, 24), (1, 1, 24, 20), 1, 1, "VALID"),
    ("wide-co", (1, 5, 6, 3), (3, 3, 3, 40), 1, 1, "SAME"),
    ("stem-7x7-s2", (1, 16, 16, 3), (7, 7, 3, 8), 2, 1, "SAME"),
    # Rows wide enough for whole interior register blocks (contiguous (kw, i) runs, row tiles).
    ("wide-row-c3", (2, 5, 23, 3), (3, 5, 3, 8), 1, 1, "SAME"),
    ("wide-row-s2-c20", (1, 6, 30, 20), (3, 3, 20, 12), (1, 2), 1, "SAME"),
    ("wide-row-dw", (1, 4, 29, 16), (3, 3, 1, 16), 2, 1, "SAME"),
    ("wide-row-dw-s1", (1, 5, 21, 12), (3, 3, 1, 12), 1, 1, "SAME"),
    # Depthwise 3x3 filter gradients whose chunks start mid-row (and padding on one side only).
    ("dw-chunks-s2", (3, 10, 25, 20), (3, 3, 1, 20), 2, 1, "SAME"),
    ("dw-s2-even", (2, 6, 24, 18), (3, 3, 1, 18), 2, 1, "SAME"),  # pads right only: left taps unreached
    ("dw-s2-explicit", (1, 7, 21, 17), (3, 3, 1, 17), 2, 1, ((1, 2), (2, 3))),
    ("dw-chunks-explicit", (2, 9, 40, 18), (3, 3, 1, 18), 1, 1, ((0, 2), (2, 0))),
    # Input gradients with pixel lanes (few channels per group): whole interior blocks and border masks.
    ("wide-row-s2-c3", (1, 5, 150, 3), (7, 7, 3, 8), 2, 1, "SAME"),
    ("wide-row-c1-d2", (1, 4, 70, 1), (3, 5, 1, 4), 1, (1, 2), "SAME"),
]

# The raw-kernel tests' own 2-D selection (tests/test_kernels.py).
CASES_2D_KERNELS = [
    ("3x3-same", (2, 6, 7, 5), (3, 3, 5, 6), 1, 1, "SAME"),
    ("3x3-valid-s2", (2, 9, 8, 4), (3, 3, 4, 7), 2, 1, "VALID"),
    ("5x3-s21-d12", (1, 11, 10, 3), (5, 3, 3, 4), (2, 1), (1, 2), "SAME"),
    ("explicit", (2, 6, 7, 3), (3, 2, 3, 4), (1, 2), 1, ((1, 2), (0, 3))),
    ("groups4-s2", (1, 9, 7, 8), (2, 3, 2, 12), 2, 1, ((0, 1), (2, 0))),
    ("depthwise-m3-s2", (2, 9, 9, 4), (3, 3, 1, 12), 2, 1, "SAME"),
    ("depthwise-d2", (1, 9, 10, 5), (3, 3, 1, 5), 1, 2, "VALID"),
    ("1x1-wide", (2, 5, 5, 24), (1, 1, 24, 20), 1, 1, "VALID"),
    ("dw-chunks-s2", (3, 10, 25, 20), (3, 3, 1, 20), 2, 1, "SAME"),
    ("dw-s2-even", (2, 6, 24, 18), (3, 3, 1, 18), 2, 1, "SAME"),
    ("rows-of-14", (2, 5, 14, 20), (3, 3, 20, 24), 1, 1, "SAME"),  # 7-pixel blocks on AVX-512
    ("wide-groups-dw", (3, 9, 10, 10), (3, 3, 10, 70), 1, 1, "SAME"),  # 6x4 dw tiles on AVX-512, 5 chunks
    ("wide-groups-dx", (2, 4, 19, 70), (3, 3, 70, 12), 1, 1, "SAME"),  # 7x4 dx tiles on AVX-512, 19 = 7 + 7 + 5
    ("wide-groups-dx-s2", (1, 5, 24, 66), (3, 3, 66, 64), 2, 1, "SAME"),  # the same per stride phase (12 = 6 + 6); 7x4 forward
    # 1x1 filter gradient with x packed per i-block (8+ output-channel blocks on AVX2 and AVX-512),
    # 4 chunks starting mid-row, the last i-block part empty (14 = 6 + 6 + 2).
    ("1x1-packed-dw", (2, 9, 13, 14), (1, 1, 14, 460), 1, 1, "SAME"),
    ("3x3-packed-dw", (2, 17, 21, 5), (3, 3, 5, 460), (2, 1), 1, "SAME"),  # padded taps packed as +0, 6 chunks
    # Rows the AVX2 forward takes in 6-pixel blocks (23 = 6*4 - 1), with groups and dilation.
    ("rows-of-23-groups-d2", (1, 5, 23, 8), (3, 3, 4, 10), 1, 2, "SAME"),
    # AVX-512's 4-vector forward and GEMM tiles with a last block of 60 of 64 channels (fills_blocks):
    # 3x3 forward rows of 7 + 2 pixels; 1x1 forward and input gradient (the transposed GEMM) on 21 pixels.
    ("partial-wide-block", (1, 4, 9, 5), (3, 3, 5, 124), 1, 1, "SAME"),
    ("1x1-partial-wide-block", (1, 3, 7, 124), (1, 1, 124, 124), 1, 1, "VALID"),
    # Depthwise 3x3 row ends in the column-clipped blocks (forward: +0 columns; input gradient: skipped
    # columns): paddings past one column, rows shorter than a block, both strides.
    ("dw3-same-rows-of-19", (2, 5, 19, 20), (3, 3, 1, 20), 1, 1, "SAME"),  # 8-pixel blocks: 0, 8, 11
    ("dw3-pads-short-rows", (2, 6, 5, 20), (3, 3, 1, 20), 1, 1, ((3, 1), (3, 4))),
    ("dw3-s2-pads", (1, 7, 23, 17), (3, 3, 1, 17), 2, 1, ((2, 0), (3, 2))),
    ("dw3-s2-valid-24", (1, 5, 24, 17), (3, 3, 1, 17), 2, 1, "VALID"),  # the last block's taps pass the row
    # A stem's filter gradient on AVX-512's 7-pair x 4-vector joint tiles (21 pairs, 70 = 64 + 6 output
    # channels, 4 chunks starting mid-row); depthwise 3x3 filter gradients in units of two vectors with a
    # last unit of one (stride 2, 48 channels) and of one partial vector (stride 1, 20 channels: above).
    ("stem-wide-joint", (2, 17, 21, 3), (7, 7, 3, 70), 2, 1, "SAME"),
    ("dw3-s2-pairs-c48", (2, 9, 20, 48), (3, 3, 1, 48), 2, 1, "SAME"),
    # Depthwise 5- and 7-wide filters in the column-sweep blocks (forward and input gradient): interior
    # blocks and clipped row ends, rows shorter than a block, padding past several columns, both strides,
    # and a channel multiplier (the forward's repeated channels).
    ("dw5-s1-same-rows-of-21", (2, 6, 21, 20), (5, 5, 1, 20), 1, 1, "SAME"),  # 8-pixel blocks: 0, 8, 13; 7: 0, 7, 14
    ("dw7-s1-same-rows-of-30", (1, 9, 30, 20), (7, 7, 1, 20), 1, 1, "SAME"),  # 7x7 interior blocks (8 or 7 pixels)
    ("dw7-pads-short-rows", (1, 9, 6, 18), (7, 7, 1, 18), 1, 1, ((3, 2), (4, 5))),
    ("dw5-s2-same", (2, 7, 27, 17), (5, 5, 1, 17), 2, 1, "SAME"),
    ("dw7-s2-valid-30", (1, 9, 30, 16), (7, 7, 1, 16), 2, 1, "VALID"),
    ("dw5-s21-explicit", (1, 8, 26, 12), (5, 5, 1, 12), (2, 1), 1, ((1, 3), (0, 4))),
    ("dw5-m2", (1, 6, 19, 6), (5, 5, 1, 12), 1, 1, "SAME"),
    # Grouped layers with lanes across groups (few channels per group; forward and filter gradient: Cg
    # input <= Cog output channels, input gradient: Cog <= Cg): ResNeXt's 4 + 4 per group (two vectors on
    # AVX-512, four on AVX2), 2 + 2 with stride 2, a last vector past the channels and explicit padding,
    # 2 + 8 with dilation (forward, filter gradient), 8 + 2 (input gradient), 16 + 16 (the filter
    # gradient's one-group vectors on AVX-512).
    ("groups-lanes-4x4", (2, 6, 11, 32), (3, 3, 4, 32), 1, 1, "SAME"),
    ("groups-lanes-2x2-s2", (1, 7, 13, 12), (3, 3, 2, 12), 2, 1, ((1, 0), (2, 1))),
    ("groups-lanes-2x8-d2", (1, 5, 9, 16), (3, 3, 2, 64), 1, 2, "SAME"),
    ("groups-lanes-8x2", (1, 6, 10, 64), (3, 3, 8, 16), 1, 1, "SAME"),
    ("groups-lanes-16x16", (1, 5, 7, 64), (3, 3, 16, 64), 1, 1, "SAME"),
    # One vector of output channels per group on rows of 14 and 28 (AVX-512's 14-pixel blocks: interior
    # and edge blocks, a VALID row, 8 of 16 lanes live with Cg > Cog, stride 2 onto 14).
    ("groups-16x16-rows-of-14", (2, 5, 14, 64), (3, 3, 16, 64), 1, 1, "SAME"),
    ("groups-16x16-valid-28", (1, 4, 30, 32), (3, 3, 16, 32), 1, 1, "VALID"),
    ("groups-12x8-rows-of-14", (1, 6, 14, 24), (3, 3, 12, 16), 1, 1, ((1, 1), (2, 0))),
    ("groups-16x16-s2-onto-14", (1, 6, 28, 32), (3, 3, 16, 32), 2, 1, "SAME"),
]

# Layers whose float16 x and dy the CPU kernels read in place (fprop_takes_half and its siblings in
# csrc/cpu/kernels_impl.h). Depthwise 3x3, widened per vector: strides 1 and 2, interior and border
# blocks, rows that end mid-vector, channels that end mid-vector, explicit and one-sided padding (7
# channels: the input gradient's pixel lanes on AVX-512, through a float copy); input gradients of 5-
# and 7-wide depthwise filters (their forward passes and filter gradients convert). 1x1 GEMM forward and
# input gradient, widened per block of pixels: pixels of 124 channels (vectors past each pixel), and
# folds past one 32 KiB filter chunk (200 input, 192 output channels) with a last block past the pixels.
# Input gradients of grouped layers on lanes across groups, widened per vector.
# (1x1 filter gradients widened per chunk: test_kernels.py, a layer past 16 MiB of float x and dy.)
CASES_HALF_DIRECT = [
    ("dw3-s1-same", (2, 6, 37, 20), (3, 3, 1, 20), 1, 1, "SAME"),
    ("dw3-s2-same", (2, 7, 31, 33), (3, 3, 1, 33), 2, 1, "SAME"),
    ("dw3-s1-valid-c7", (1, 5, 19, 7), (3, 3, 1, 7), 1, 1, "VALID"),
    ("dw3-s21-explicit", (2, 8, 26, 18), (3, 3, 1, 18), (2, 1), 1, ((1, 2), (2, 0))),
    ("dw3-s12-d2rows", (1, 9, 23, 16), (3, 3, 1, 16), (1, 2), (2, 1), "SAME"),
    ("dw5-s1-same", (1, 6, 23, 20), (5, 5, 1, 20), 1, 1, "SAME"),  # input gradient: 5- and 7-wide sweeps
    ("dw7-s2-same", (1, 7, 29, 18), (7, 7, 1, 18), 2, 1, "SAME"),
    ("1x1-gemm-c124", (1, 3, 7, 124), (1, 1, 124, 124), 1, 1, "VALID"),
    ("1x1-gemm-chunks", (2, 3, 11, 200), (1, 1, 200, 192), 1, 1, "SAME"),
    ("groups-lanes-4x4", (2, 6, 11, 32), (3, 3, 4, 32), 1, 1, "SAME"),  # input gradient, lanes across groups
    ("groups-lanes-2x2-s2", (1, 7, 13, 12), (3, 3, 2, 12), 2, 1, ((1, 0), (2, 1))),
]

# (name, x shape NDHWC, filter DHWIO, strides, dilations, padding (reference form))
CASES_3D = [
    ("3x3x3-same", (2, 5, 6, 7, 3), (3, 3, 3, 3, 4), 1, 1, "SAME"),
    ("strided-valid", (1, 7, 6, 5, 4), (3, 2, 3, 4, 6), (2, 1, 2), 1, "VALID"),
    ("dilated-explicit", (2, 6, 5, 6, 4), (3, 3, 2, 4, 5), 1, (2, 1, 2), ((1, 2), (0, 1), (2, 0))),
    ("groups2", (1, 5, 6, 6, 8), (2, 3, 3, 4, 6), (1, 2, 1), 1, "SAME"),
    ("depthwise-s2", (2, 5, 5, 5, 6), (3, 3, 3, 1, 6), 2, 1, "SAME"),
    ("depthwise-5wide", (1, 4, 5, 13, 6), (3, 3, 5, 1, 6), 1, 1, "SAME"),  # the forward's 5-wide column sweeps
    ("pointwise", (2, 3, 4, 5, 12), (1, 1, 1, 12, 10), 1, 1, "VALID"),
    ("temporal-only", (1, 8, 3, 4, 5), (4, 1, 1, 5, 3), (2, 1, 1), (1, 1, 1), ((2, 1), (0, 0), (0, 0))),
    ("wide-rows", (1, 3, 4, 23, 16), (3, 3, 3, 16, 16), 1, 1, "SAME"),
    ("wide-groups", (1, 3, 4, 6, 66), (3, 3, 3, 66, 8), 1, 1, "SAME"),  # 7x4 dx tiles on AVX-512 (one block of 6)
    # SAME whose padding would be negative (depth -2, width -4): it is zero. TensorFlow 2.21's CPU conv3d without
    # oneDNN shifts the window by half of it instead (docs/contract.md, Padding).
    ("same-stride-past-filter", (1, 9, 5, 15, 3), (1, 3, 1, 3, 4), (3, 1, 5), 1, "SAME"),
]

