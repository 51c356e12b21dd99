//! Compiles containerd's API (`proto/`, see its README) with protox, so no
//! `protoc` is needed on the build machine: the snapshots service as the
//! tonic server the proxy snapshotter serves, and the images and content
//! services as clients, with which the snapshotter finds the image a
//! layer unpacked by `ctr images pull` came from. And our own fuse
//! manager's service (`proto/sealvol/`), served and called over a unix
//! socket between the snapshotter's two processes.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let api = "proto/github.com/containerd/containerd/api/services";
    let protos = [
        format!("{api}/snapshots/v1/snapshots.proto"),
        format!("{api}/images/v1/images.proto"),
        format!("{api}/content/v1/content.proto"),
        "proto/sealvol/fusemanager/v1/fusemanager.proto".to_string(),
    ];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
