//! With the `remote` feature, generates the gRPC client and server for
//! remote devices from `proto/remote.proto` with tonic's prost generator.
//! protoc comes from `protoc-bin-vendored`, so a build needs no system
//! protoc. Without the feature it does nothing (and needs neither).

#[cfg(feature = "remote")]
fn main() -> std::io::Result<()> {
    let protoc = protoc_bin_vendored::protoc_bin_path()
        .map_err(|e| std::io::Error::other(format!("no vendored protoc: {e}")))?;
    // prost-build finds protoc through PROTOC.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure()
        // Tensor data as `bytes::Bytes`: chunks slice one buffer, no copy.
        .bytes(".tilejit.remote.v1")
        .compile_protos(&["proto/remote.proto"], &["proto"])
}

#[cfg(not(feature = "remote"))]
fn main() {
    // Without this line cargo would rerun the script on any change.
    println!("cargo:rerun-if-changed=build.rs");
}
