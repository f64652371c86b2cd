//! One dump as JSON lines: a machine-readable `ss -tni`, with cgmon-rs's filter syntax.
//!
//! ```text
//! cargo run --example dump -- [--states LIST] [--mode auto|single|per-family] [FILTER...]
//! cargo run --example dump -- dport 443 or sport 22
//! cargo run --example dump -- --states established src 127.0.0.0/8
//! ```
//! Each line is one socket: the `inet_diag_msg` fields, the attributes the kernel sent and
//! every `tcp_info` field present (kernel member names, no `tcpi_` prefix). Absent fields are
//! left out, never zero-filled.

use std::process::ExitCode;

mod dumpcmd;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", dumpcmd::USAGE);
        return ExitCode::SUCCESS;
    }
    match dumpcmd::parse_args(args) {
        Ok(mut a) => {
            a.count = 1;
            let out = std::io::BufWriter::new(std::io::stdout().lock());
            ExitCode::from(dumpcmd::run(a, out).await)
        }
        Err(e) => {
            eprintln!("dump: {e}");
            ExitCode::from(2)
        }
    }
}
