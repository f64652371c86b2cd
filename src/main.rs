//! `cgmon-rs`: the program. Everything lives in the library (`cgmon_rs::app`).

fn main() -> std::process::ExitCode {
    cgmon_rs::app::main(std::env::args().skip(1).collect())
}
