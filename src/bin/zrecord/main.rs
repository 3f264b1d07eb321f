//! The `zrecord` command-line tool: convert `.npy` arrays into a dataset, inspect it, verify it,
//! print records and measure throughput. Thin over the library: one module per subcommand.
//!
//! Exit status: 0 on success; 1 with one line `zrecord: <error>` on stderr on failure (`verify`
//! first lists each problem it found, one per line); 2 for a command-line usage error.

mod bench;
mod cat;
mod convert;
mod info;
mod progress;
mod rebalance;
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
    /// Convert .npy files into a new dataset: one field per file, one record per row (axis 0).
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
    /// Throughput measurements.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
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
            // One line: clap's message (up to its first blank line), without the usage block.
            let text = e.render().to_string();
            let message: Vec<&str> = text
                .lines()
                .map(str::trim)
                .skip_while(|l| l.is_empty())
                .take_while(|l| !l.is_empty())
                .collect();
            let line = message.join(" ");
            let line = line.trim_start_matches("error: ");
            eprintln!("zrecord: {line} (see --help)");
            return ExitCode::from(2);
        }
    };
    let result = match &cli.cmd {
        Cmd::Convert(a) => convert::run(a),
        Cmd::Info(a) => info::run(a),
        Cmd::Verify(a) => verify::run(a),
        Cmd::Rebalance(a) => rebalance::run(a),
        Cmd::Cat(a) => cat::run(a),
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
