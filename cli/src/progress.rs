//! Progress bars on stderr, only when stderr is a terminal (scripts and
//! JSON consumers see nothing).

use std::io::IsTerminal as _;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sealvol_client::{NoProgress, Progress};

struct Bar(ProgressBar);

impl Progress for Bar {
    fn phase(&self, name: &str, total: u64) {
        let bar = &self.0;
        bar.reset();
        if total == 0 {
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {bytes} ({binary_bytes_per_sec})")
                    .expect("valid template"),
            );
            bar.set_length(0);
        } else {
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:>11} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar.set_length(total);
        }
        bar.set_message(name.to_string());
    }

    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// A bar when a person is watching, nothing otherwise.
pub fn for_terminal(quiet: bool) -> Arc<dyn Progress> {
    if quiet || !std::io::stderr().is_terminal() {
        return Arc::new(NoProgress);
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    Arc::new(Bar(bar))
}
