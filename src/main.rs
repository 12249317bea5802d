//! The `zcpipe` binary: parses arguments and calls into the library.

fn main() {
    std::process::exit(zcpipe::cli::main());
}
