//! Compiles containerd's snapshots service (`proto/`, see its README) into
//! the tonic server the proxy snapshotter serves, with protox: no `protoc`
//! on the build machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let service =
        "proto/github.com/containerd/containerd/api/services/snapshots/v1/snapshots.proto";
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile([service], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
