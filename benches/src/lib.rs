//! `tilejit-benches`: the workload benchmarks (W1-W8 of `shared/design.md`) and
//! criterion benches land here with the native host backend; timing the
//! reference interpreter would measure nothing users should rely on.
