//! How a command prints what it did: text for people, or one JSON document
//! (`--output json`) for scripts. Every command module names it, and
//! main.rs, which calls them all, parses it; it lives apart from both so
//! neither imports the other for it.

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}
