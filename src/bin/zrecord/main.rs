//! The `zrecord` command-line tool: convert `.npy` arrays into a dataset, inspect it, verify it,
//! print records and measure throughput. Thin over the library: one module per subcommand.
//!
//! Exit status: 0 on success; 1 with one line `zrecord: <error>` on stderr on failure (`verify`
//! first lists each problem it found, one per line); 2 for a command-line usage error.

mod args;
mod bench;
mod cat;
mod collection;
mod convert;
mod info;
mod progress;
mod rebalance;
mod transfer;
mod verify;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "zrecord",
    version,
    about = "zrecord datasets: convert .npy arrays, inspect, verify, rebalance, print records, benchmark"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Convert files into a new dataset: .npy arrays (`npy`, or no form name), class folders of
    /// images (`images`), WebDataset tar shards (`webdataset`).
    Convert(convert::ConvertArgs),
    /// Print a dataset's length, fields, chunks, bytes, compression ratio and utilization.
    Info(info::InfoArgs),
    /// Check every checksum and structural invariant; exits non-zero listing each problem.
    Verify(verify::VerifyArgs),
    /// Rewrite live records into fresh chunks (manual compaction); prints utilization before and
    /// after.
    Rebalance(rebalance::RebalanceArgs),
    /// Print one record, as typed JSON values or raw bytes.
    Cat(cat::CatArgs),
    /// Publish a local dataset to an object store (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix).
    Push(transfer::PushArgs),
    /// Fetch a dataset from an object store into a new local directory.
    Pull(transfer::PullArgs),
    /// Collections: many datasets (parts) committed together and read as one.
    #[command(subcommand)]
    Collection(collection::CollectionCmd),
    /// Remove a collection's parts that no manifest names, once older than --older-than.
    Gc(collection::GcArgs),
    /// Throughput measurements.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
}

/// A usage error as one line: clap's message and its tips (`a similar subcommand exists: ...`,
/// the values a flag accepts), without the usage block.
fn usage_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let message = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_string();
    let mut line = message;
    for l in
        lines.take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
    {
        // Tips are sentences of their own; other lines continue the message (a list of
        // missing arguments, the possible values).
        line.push_str(if l.starts_with("tip:") { "; " } else { " " });
        line.push_str(l);
    }
    line
}

/// Log lines on stderr through `tracing-subscriber`: `RUST_LOG` picks what is shown (e.g.
/// `RUST_LOG=zrecord=debug`); without it, warnings and errors are (such as a fallback from
/// io_uring to the pread pool). A bad `RUST_LOG` falls back to the default, with a note.
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let (filter, bad) = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => match EnvFilter::try_new(&v) {
            Ok(f) => (f, None),
            Err(e) => (EnvFilter::new("warn"), Some(format!("{v:?}: {e}"))),
        },
        _ => (EnvFilter::new("warn"), None),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(false)
        .try_init();
    if let Some(bad) = bad {
        tracing::warn!("ignoring RUST_LOG {bad}");
    }
}

/// What every subcommand returns; the error is printed as one line.
pub type Res = Result<(), Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || matches!(
                    e.kind(),
                    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
            {
                let _ = e.print();
                return if e.use_stderr() {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            eprintln!("zrecord: {} (see --help)", usage_line(&e));
            return ExitCode::from(2);
        }
    };
    if let Cmd::Convert(a) = &cli.cmd {
        if let Some(line) = convert::usage_error(a) {
            eprintln!("zrecord: {line} (see --help)");
            return ExitCode::from(2);
        }
    }
    init_logging();
    let result = match &cli.cmd {
        Cmd::Convert(a) => convert::run(a),
        Cmd::Info(a) => info::run(a),
        Cmd::Verify(a) => verify::run(a),
        Cmd::Rebalance(a) => rebalance::run(a),
        Cmd::Cat(a) => cat::run(a),
        Cmd::Push(a) => transfer::push(a),
        Cmd::Pull(a) => transfer::pull(a),
        Cmd::Collection(c) => collection::run(c),
        Cmd::Gc(a) => collection::run_gc(a),
        Cmd::Bench(b) => bench::run(b),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and each of its sources, whatever their own formatting.
            let mut msg = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                msg = format!("{msg}: {s}");
                source = s.source();
            }
            let msg = msg.replace('\n', " ");
            eprintln!("zrecord: {msg}");
            ExitCode::FAILURE
        }
    }
}
