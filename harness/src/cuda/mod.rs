//! The real CUDA backend.
