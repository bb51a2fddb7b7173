//! Which process a pid file names, and whether that very process still runs. Pids are reused, so
//! a pid alone is never trusted: a record is checked against the process table (`/proc`) before
//! anyone signals it, and a stranger that got the same pid counts as "not running".
//!
//! A pid file holds the pid on its first line, so `kill $(head -n 1 FILE)` works; `spawn` adds
//! `program NAME` and `started TICKS` (the start time in `/proc/PID/stat`, which tells one process
//! from a later one with the same pid). `up`'s `envtest.pid` holds the pid alone; it is checked by
//! the name of the running executable instead.

use crate::args::Target;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The pid file `envtest up` writes into its state directory.
pub const UP_PID_FILE: &str = "envtest.pid";

#[derive(Debug, PartialEq)]
pub struct Record {
    pub pid: u32,
    /// For messages, and the check when `started` is unknown.
    pub program: String,
    pub started: Option<u64>,
}

impl Record {
    /// The record of a process that runs now (spawned a moment ago).
    pub fn of(pid: u32, program: &str) -> Record {
        Record {
            pid,
            program: program.to_owned(),
            started: start_time(pid),
        }
    }

    /// Reads a pid file's text; `program` names the process when the file does not.
    pub fn parse(text: &str, program: &str) -> Result<Record, String> {
        let mut lines = text.lines();
        let first = lines.next().unwrap_or("").trim();
        let pid = first
            .parse::<u32>()
            .ok()
            .filter(|pid| (2..=i32::MAX as u32).contains(pid))
            .ok_or_else(|| format!("its first line should be a pid, not {first:?}"))?;
        let mut record = Record {
            pid,
            program: program.to_owned(),
            started: None,
        };
        for line in lines {
            match line.trim().split_once(' ') {
                Some(("program", name)) if !name.trim().is_empty() => record.program = name.trim().to_owned(),
                Some(("started", ticks)) => {
                    let ticks = ticks.trim();
                    record.started = Some(
                        ticks
                            .parse()
                            .map_err(|_| format!("`started` should be a number, not {ticks:?}"))?,
                    );
                }
                // Other lines are for people, or for a later version.
                _ => {}
            }
        }
        Ok(record)
    }

    pub fn render(&self) -> String {
        let mut text = format!("{}\nprogram {}\n", self.pid, self.program);
        if let Some(started) = self.started {
            text.push_str(&format!("started {started}\n"));
        }
        text
    }

    /// Whether the recorded process runs: alive, and the same process by its start time, or else
    /// by its executable's name.
    pub fn is_running(&self) -> bool {
        alive(self.pid)
            && match self.started {
                Some(started) => start_time(self.pid) == Some(started),
                None => executable_name(self.pid).is_some_and(|name| name == self.program),
            }
    }
}

/// A target's pid file, and the program it names when the file does not say.
pub fn locate(target: &Target) -> (PathBuf, String) {
    match target {
        Target::StateDir(dir) => (dir.join(UP_PID_FILE), own_name()),
        Target::PidFile(file) => {
            let name = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            (file.clone(), name)
        }
    }
}

/// The record in `path`, or `None` when there is no such file.
pub fn read(path: &Path, program: &str) -> Result<Option<Record>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Record::parse(&text, program)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

/// Writes the record whole or not at all (through a rename), so a reader never sees half of it.
pub fn write(path: &Path, record: &Record) -> Result<(), String> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, record.render())
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Removes a file that may already be gone.
pub fn remove(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {}: {e}", path.display())),
    }
}

/// `envtest running`: the pid and success when the target's process runs, else failure.
pub fn running(target: &Target) -> Result<ExitCode, String> {
    let (path, program) = locate(target);
    match read(&path, &program)? {
        Some(record) if record.is_running() => {
            println!("{}", record.pid);
            Ok(ExitCode::SUCCESS)
        }
        _ => Ok(ExitCode::FAILURE),
    }
}

/// Whether a process is running: it exists and is not a zombie. A child not yet reaped stays a
/// zombie (`Z`) after it exits, and counts as gone.
pub fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|fields| fields.first().is_some_and(|state| *state != "Z"))
}

/// Whether the process `pid` runs this binary (guards against a reused pid). When that cannot be
/// told (another user's process), it says yes: `up` would rather refuse than share a directory.
pub fn is_envtest(pid: u32) -> bool {
    executable_name(pid).is_none_or(|theirs| theirs == own_name())
}

/// The fields of `/proc/PID/stat` after the parenthesised command name, from the state (field 3)
/// on; the name itself may hold spaces and parentheses.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Whether the process leads its own process group (field 5 of `/proc/PID/stat`, the group id,
/// is its own pid).
pub fn leads_group(pid: u32) -> bool {
    stat_fields(pid).and_then(|fields| fields.get(5 - 3)?.parse::<u32>().ok()) == Some(pid)
}

/// When the process started, in clock ticks after boot (field 22 of `/proc/PID/stat`).
fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(22 - 3)?.parse().ok()
}

/// The file name of the process's executable; a binary rebuilt since it started still counts
/// (Linux then adds " (deleted)" to the link).
fn executable_name(pid: u32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    Some(name.strip_suffix(" (deleted)").map(str::to_owned).unwrap_or(name))
}

fn own_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_name().map(|name| name.to_string_lossy().into_owned()))
        .map(|name| name.strip_suffix(" (deleted)").map(str::to_owned).unwrap_or(name))
        .unwrap_or_else(|| "envtest".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_what_it_wrote() {
        let record = Record {
            pid: 4242,
            program: "mimeo".into(),
            started: Some(987),
        };
        assert_eq!(record.render(), "4242\nprogram mimeo\nstarted 987\n");
        assert_eq!(Record::parse(&record.render(), "other"), Ok(record));
    }

    #[test]
    fn a_bare_pid_takes_the_default_program() {
        assert_eq!(
            Record::parse("77\n", "envtest"),
            Ok(Record {
                pid: 77,
                program: "envtest".into(),
                started: None
            })
        );
    }

    #[test]
    fn refuses_what_is_no_pid() {
        for text in ["", "\n", "abc\n", "0\n", "1\n", "-5\n", "4294967295\n", "12 13\n"] {
            assert!(Record::parse(text, "x").is_err(), "{text:?} should be refused");
        }
        assert!(
            Record::parse("12\nstarted soon\n", "x")
                .unwrap_err()
                .contains("started")
        );
    }

    #[test]
    fn this_process_runs_and_a_different_start_time_does_not() {
        let me = Record::of(std::process::id(), "whatever");
        assert!(me.started.is_some());
        assert!(me.is_running());
        let stranger = Record {
            started: me.started.map(|t| t + 1),
            ..me
        };
        assert!(!stranger.is_running());
    }
}
