//! `sealvol-conformance --url URL`: runs the OCI distribution-spec checks
//! against a registry. Exit status: 0 all passed, 1 some failed, 2 usage
//! error or registry unreachable.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use sealvol_conformance::{run, Config, DEFAULT_NAMESPACE};

#[derive(Parser, Debug)]
#[command(
    name = "sealvol-conformance",
    version,
    about = "Check a registry against the OCI distribution-spec v1.1 workflows \
             (pull, push, content discovery, content management)"
)]
struct Cli {
    /// Registry base URL, e.g. http://127.0.0.1:5000
    #[arg(long)]
    url: String,
    /// Repository to push test content to (a sibling <namespace>/other is
    /// used for cross-repository checks)
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    namespace: String,
    /// Output format
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Per-request timeout in seconds
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// User name for a registry with auth on (the password comes from
    /// --password-stdin)
    #[arg(long, requires = "password_stdin")]
    user: Option<String>,
    /// Read the password from standard input (one line)
    #[arg(long, requires = "user")]
    password_stdin: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("sealvol-conformance: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs and prints; `Ok(true)` when every check passed.
fn real_main(cli: &Cli) -> anyhow::Result<bool> {
    let credentials = match &cli.user {
        Some(user) => {
            let mut password = String::new();
            std::io::stdin()
                .read_line(&mut password)
                .context("reading the password from standard input")?;
            let password = password.trim_end_matches(['\n', '\r']).to_string();
            Some((user.clone(), password))
        }
        None => None,
    };
    let config = Config {
        url: cli.url.clone(),
        namespace: cli.namespace.clone(),
        timeout: Duration::from_secs(cli.timeout.max(1)),
        credentials,
    };
    let stdout = std::io::stdout();
    let text = cli.output == Output::Text;
    let report = run(&config, |r| {
        if text {
            let mut out = stdout.lock();
            let _ = writeln!(out, "{}", r.line());
            let _ = out.flush();
        }
    })?;
    let mut out = stdout.lock();
    if text {
        write!(out, "{}", report.text_footer()).context("writing the report")?;
    } else {
        let json =
            serde_json::to_string_pretty(&report.to_json()).context("encoding the report")?;
        writeln!(out, "{json}").context("writing the report")?;
    }
    Ok(report.all_passed())
}
