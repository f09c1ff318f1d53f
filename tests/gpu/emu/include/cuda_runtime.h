// Emulation stand-in for <cuda_runtime.h> (tests/gpu/emu only).
#pragma once
#include "cuda_emu.h"
