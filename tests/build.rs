//! Compiles the Kubernetes CRI API (`proto/runtime/v1/api.proto`, cri-api's
//! file unchanged as the Go module `k8s.io/cri-api` v0.37.0 ships it, the
//! API of Kubernetes 1.37 with image-volume `image_sub_path` and user
//! namespaces; Apache-2.0, The Kubernetes Authors) into a tonic client with
//! protox, no `protoc`: the containerd tests run pods, containers and pulls
//! through CRI as a kubelet does.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["proto/runtime/v1/api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
