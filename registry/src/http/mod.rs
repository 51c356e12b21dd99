//! The wire: parse once, call a service, answer.

pub mod access;
pub mod api;
pub mod extract;
pub mod layers;
pub mod oci;
pub(crate) mod query;
pub mod respond;
pub mod routes;
pub mod token;
pub mod ui;
