//! A fault-injecting HTTP proxy in front of an S3 server, for benchmarks and experiments:
//! `zrecord_testing::FaultProxy` as a process. Prints its endpoint, then serves until killed.
//!
//! ```sh
//! cargo run --release --example s3_proxy -- \
//!     --upstream http://127.0.0.1:9000 --latency-ms 20 [--unavailable 0.1] [--reset 0.05]
//! AWS_ENDPOINT=<printed endpoint> zrecord bench loader s3://bucket/prefix
//! ```

use std::time::Duration;

use zrecord_testing::{FaultConfig, FaultProxy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut upstream = None;
    let mut config = FaultConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--upstream" => upstream = Some(value()?),
            "--latency-ms" => config = config.latency(Duration::from_millis(value()?.parse()?)),
            "--unavailable" => config = config.unavailable(value()?.parse()?),
            "--reset" => config = config.reset(value()?.parse()?),
            "--truncate" => config = config.truncate(value()?.parse()?),
            "--seed" => config = config.seed(value()?.parse()?),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let upstream = upstream.ok_or("--upstream http://HOST:PORT is required")?;
    let proxy = FaultProxy::start(&upstream, config)?;
    println!("{}", proxy.endpoint());
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
