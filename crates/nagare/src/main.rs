//! The `nagare` binary: the command line of the library (cli/).

fn main() -> std::process::ExitCode {
    nagare::cli::main()
}
