//! The `zcpipe` binary: hands the process to the command-line front, `zcpipe::cli::main`,
//! which parses the arguments and calls into the library.

fn main() {
    std::process::exit(zcpipe::cli::main());
}
