//! `trawl`: research jobs at scale. See [`trawl::cli`].

fn main() -> std::process::ExitCode {
    trawl::cli::main()
}
