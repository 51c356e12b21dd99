//! The conformance runner (to come): checks any registry URL against the OCI
//! distribution workflows and the sealvol volume format. Nothing is implemented yet.
