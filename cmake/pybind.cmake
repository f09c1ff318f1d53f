# Placeholder until the CUDA issue builds detconv._kernels here.
