//! kernelkit's op library: CUDA sources of the shipped ops and their CPU implementations.
