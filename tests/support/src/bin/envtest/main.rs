//! `envtest`: long-lived control planes and detached processes for local use, such as the demo
//! (`./demo.sh`), which leaves all of its process management here. `up` runs a control plane in
//! the foreground; `start` runs `up` detached and waits until it is ready; `spawn` does the same
//! for any program (mimeo); `stop` and `running` find what either recorded. This file only
//! parses and dispatches; see `envtest --help`.

#![deny(unsafe_code)]

mod args;
mod detached;
mod pid_file;
mod shutdown;
mod stop;
mod up;

use args::{Invocation, USAGE};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let invocation = match args::parse(std::env::args_os().skip(1)) {
        Ok(Invocation::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(invocation) => invocation,
        Err(message) => {
            eprintln!("envtest: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let outcome = match invocation {
        Invocation::Up(up) => up::run(up).await.map(|()| ExitCode::SUCCESS),
        Invocation::Start(start) => detached::start(start).await.map(|()| ExitCode::SUCCESS),
        Invocation::Spawn(spawn) => detached::spawn(spawn).await.map(|()| ExitCode::SUCCESS),
        Invocation::Stop(targets) => stop::stop(&targets).await.map(|()| ExitCode::SUCCESS),
        Invocation::Running(target) => pid_file::running(&target),
        Invocation::Help => Ok(ExitCode::SUCCESS),
    };
    outcome.unwrap_or_else(|message| {
        // One write, so that two envtests started side by side do not interleave their lines.
        let line = format!("envtest: error: {message}\n");
        eprint!("{line}");
        ExitCode::FAILURE
    })
}
