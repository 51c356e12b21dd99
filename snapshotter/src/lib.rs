//! sealvol's mount side (to come): the FUSE lazy mount of a sealed version
//! and the containerd proxy snapshotter built on it. Nothing is implemented yet.
