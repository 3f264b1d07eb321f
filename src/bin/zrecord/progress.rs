//! Progress bars on stderr (indicatif), drawn only when stderr is a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

fn bar(total: u64, template: &str, what: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(total), target).with_style(style);
    bar.set_message(what.to_string());
    bar
}

/// A bar counting bytes, with throughput and time left.
pub fn bytes_bar(total: u64, what: &str) -> ProgressBar {
    bar(
        total,
        "{msg} [{elapsed_precise}] [{wide_bar}] {binary_bytes}/{binary_total_bytes} \
         {binary_bytes_per_sec}, eta {eta}",
        what,
    )
}

/// A bar counting records, with their rate and time left.
pub fn records_bar(total: u64, what: &str) -> ProgressBar {
    bar(
        total,
        "{msg} [{elapsed_precise}] [{wide_bar}] {human_pos}/{human_len} records \
         ({per_sec}), eta {eta}",
        what,
    )
}
