//! The `trawl` command line, built as a binary of the end-to-end tests so that
//! they can start its roles as processes (`CARGO_BIN_EXE_trawl-e2e`).

fn main() -> std::process::ExitCode {
    trawl::cli::main()
}
