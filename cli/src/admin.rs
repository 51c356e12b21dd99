//! `sealvol admin key create|list|revoke`: API keys on a registry
//! (SPEC.md §7.5), for CI jobs and GPU nodes that should pull (or push)
//! some volumes and nothing else.

use clap::Subcommand;
use sealvol_client::keys;
use sealvol_spec::api::{Action, ApiKeyRequest};

use crate::ask::Ask;
use crate::expiry::parse_expiry_or_never;
use crate::output::Output;
use crate::volume::{print_json, runtime};

#[derive(Subcommand)]
pub enum AdminAction {
    /// Scoped, expiring API keys (admins only)
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
}

#[derive(Subcommand)]
pub enum KeyAction {
    /// Create a key; its secret is printed once (the registry keeps its hash for logins, and
    /// a copy sealed under its secrets key for checking S3 signatures)
    Create {
        /// Repositories it may touch: globs, `*` within a name component, `**` across (repeatable)
        #[arg(long = "repositories", value_name = "GLOB", required = true, num_args = 1.., value_delimiter = ',')]
        repositories: Vec<String>,
        /// pull, push, delete (comma-separated or repeated)
        #[arg(long = "actions", value_name = "ACTION", required = true, num_args = 1.., value_delimiter = ',')]
        actions: Vec<String>,
        /// When it stops working: 2026-12-09T00:00:00Z, 24h or 30d from now, or never
        #[arg(long, value_name = "TIME", default_value = "never")]
        expires: String,
        #[command(flatten)]
        ask: Ask,
    },
    /// List the keys (never their secrets)
    List {
        #[command(flatten)]
        ask: Ask,
    },
    /// Revoke a key: it and its tokens stop working at once
    Revoke {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        ask: Ask,
    },
}

pub fn run(action: AdminAction) -> anyhow::Result<()> {
    let AdminAction::Key { action } = action;
    match action {
        KeyAction::Create {
            repositories,
            actions,
            expires,
            ask,
        } => {
            let actions = actions
                .iter()
                .map(|a| a.trim().parse::<Action>())
                .collect::<Result<Vec<_>, _>>()?;
            let expires_at = parse_expiry_or_never(&expires)?
                .map(|t| humantime::format_rfc3339_seconds(t).to_string());
            let (registry, remote) = ask.connect()?;
            let req = ApiKeyRequest {
                repositories,
                actions,
                expires_at,
            };
            let key = runtime()?.block_on(keys::create(&remote, &req))?;
            match ask.output() {
                Output::Json => print_json(&key)?,
                Output::Text => {
                    println!("{}:{}", key.key.id, key.secret);
                    eprintln!(
                        "created API key {} on registry {registry}; the line above is user:password (shown once): sealvol login {registry} -u {} --password-stdin; S3 clients take the two parts as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                        key.key.id, key.key.id
                    );
                }
            }
        }
        KeyAction::List { ask } => {
            let (registry, remote) = ask.connect()?;
            let list = runtime()?.block_on(keys::list(&remote))?;
            match ask.output() {
                Output::Json => print_json(&serde_json::json!({ "keys": list }))?,
                Output::Text if list.is_empty() => eprintln!("no API keys on registry {registry}"),
                Output::Text => {
                    for k in list {
                        let actions: Vec<&str> = k.actions.iter().map(|a| a.as_str()).collect();
                        println!(
                            "{}\t{}\t{}\texpires {}\tby {}",
                            k.id,
                            k.repositories.join(","),
                            actions.join(","),
                            k.expires_at.as_deref().unwrap_or("never"),
                            k.created_by
                        );
                    }
                }
            }
        }
        KeyAction::Revoke { id, ask } => {
            let (registry, remote) = ask.connect()?;
            runtime()?.block_on(keys::revoke(&remote, &id))?;
            match ask.output() {
                Output::Json => {
                    print_json(&serde_json::json!({ "revoked": id, "registry": registry }))?
                }
                Output::Text => println!("revoked API key {id} on registry {registry}"),
            }
        }
    }
    Ok(())
}
