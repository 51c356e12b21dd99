//! sealvol's registry (to come): an OCI Distribution v1.1 server with the
//! volume API, the embedded default that `sealvol serve` runs. It will store
//! blobs on the filesystem and metadata in redb. Nothing is implemented yet.
