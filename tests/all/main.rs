//! tilejit's integration tests, in one binary so the suite links once.

mod bad_input;
mod concurrency;
mod display;
mod ir_text;
mod jit;
mod ops;
mod simplify_props;
