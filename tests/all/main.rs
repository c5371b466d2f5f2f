//! tilejit's integration tests, in one binary so the suite links once.

#![allow(clippy::unwrap_used)] // tests assert by unwrapping

mod bad_input;
mod bitwise;
mod block_math;
mod cancel;
mod concurrency;
mod conv;
mod debug_values;
mod device_tensors;
mod disk_cache;
mod display;
mod dtype_sweep;
mod dynamic;
mod einsum;
mod every_mode;
mod exp_range;
mod gather;
mod gpt;
mod hooks;
mod host_backend;
mod io;
mod ir_text;
mod jit;
mod jit_args;
mod kernel_ir;
mod layout_ops;
mod lowering_golden;
mod math_ops;
mod models;
mod onnx;
mod oom;
mod ops;
mod placement;
mod pool;
mod reductions;
mod registry;
mod run_modes;
mod scan;
mod sim_backend;
mod sim_sizes;
mod simplify_props;
mod small_ints;
mod snapshot;
mod strided_matmul;
mod tiny_call;
