//! `tilejit-codegen`: lowers kernel IR to native host code (Cranelift) and to
//! simulated-device bytecode. Empty until the host-backend issue: the
//! foundation runs every program on the reference interpreter, and no
//! placeholder code generator pretends otherwise.
