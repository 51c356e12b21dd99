//! Compiles the Kubernetes CRI API (`proto/runtime/v1/api.proto`, as the
//! `k8s-cri` crate 0.11.0 vendors cri-api's file, unchanged; Apache-2.0, The
//! Kubernetes Authors) into a tonic client with protox, no `protoc`: the
//! containerd tests pull images through CRI's `ImageService` as a kubelet
//! does.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["proto/runtime/v1/api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
