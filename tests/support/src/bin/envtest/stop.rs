//! Stopping recorded processes: SIGTERM, a grace period, then SIGKILL. The only place that sends
//! signals, and it signals only a process that is still the one recorded, never a pid alone.

use crate::args::Target;
use crate::pid_file::{self, Record};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a process gets to stop after SIGTERM before it is killed.
pub const GRACE: Duration = Duration::from_secs(20);

const POLL: Duration = Duration::from_millis(100);

/// `envtest stop`: stops every target's process at once and removes the pid files. Says
/// `stopped NAME (pid N)` for each; nothing when none was running.
pub async fn stop(targets: &[Target]) -> Result<(), String> {
    let mut records = Vec::new();
    let mut leftovers: Vec<PathBuf> = Vec::new();
    let mut errors = Vec::new();
    for target in targets {
        let (path, program) = pid_file::locate(target);
        match pid_file::read(&path, &program) {
            Ok(Some(record)) if record.is_running() => records.push(record),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
        leftovers.push(path);
        // `up` removes `ready` itself when it stops; not when it was killed.
        if let Target::StateDir(dir) = target {
            leftovers.push(dir.join(crate::up::READY));
        }
    }
    for line in terminate(&records).await {
        println!("{line}");
    }
    for record in &records {
        if record.is_running() {
            errors.push(format!(
                "{} (pid {}) is still running",
                record.program, record.pid
            ));
        }
    }
    if errors.is_empty() {
        for path in leftovers {
            pid_file::remove(&path)?;
        }
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// SIGTERM to each process, then waits for all of them; SIGKILL to those still there after
/// [`GRACE`]. Returns one line per process for the user.
pub async fn terminate(records: &[Record]) -> Vec<String> {
    let mut lines = vec![None; records.len()];
    for (line, record) in lines.iter_mut().zip(records) {
        if let Err(e) = signal(record, libc::SIGTERM) {
            *line = Some(format!(
                "could not stop {} (pid {}): {e}",
                record.program, record.pid
            ));
        }
    }
    let deadline = Instant::now() + GRACE;
    loop {
        for (line, record) in lines.iter_mut().zip(records) {
            if line.is_none() && !record.is_running() {
                *line = Some(format!("stopped {} (pid {})", record.program, record.pid));
            }
        }
        if lines.iter().all(Option::is_some) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    for (line, record) in lines.iter_mut().zip(records) {
        if line.is_none() {
            let outcome = match signal(record, libc::SIGKILL) {
                Ok(()) => "killed it".to_owned(),
                Err(e) => format!("killing it failed: {e}"),
            };
            let grace = GRACE.as_secs();
            *line = Some(format!(
                "{} (pid {}) did not stop within {grace} s; {outcome}",
                record.program, record.pid
            ));
        }
    }
    // A killed process is gone at once, but its entry may take a moment to be reaped.
    let deadline = Instant::now() + Duration::from_secs(2);
    while records.iter().any(Record::is_running) && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    lines.into_iter().flatten().collect()
}

/// Sends `signal` to the recorded process if it is still that process. SIGKILL goes to its whole
/// process group when it leads one, as what `start` and `spawn` start does (a session of its
/// own): a killed process cannot stop its children itself.
#[allow(unsafe_code)]
fn signal(record: &Record, signal: libc::c_int) -> std::io::Result<()> {
    if !record.is_running() {
        return Ok(());
    }
    // A pid above i32::MAX would turn negative and name a process group.
    let pid = libc::pid_t::try_from(record.pid).map_err(|_| std::io::Error::other("pid out of range"))?;
    if pid <= 1 {
        return Err(std::io::Error::other("refusing to signal pid 0 or 1"));
    }
    let target = if signal == libc::SIGKILL && pid_file::leads_group(record.pid) {
        -pid
    } else {
        pid
    };
    // SAFETY: kill(2) takes two integers and touches no memory of ours; `target` is a process id
    // above 1, or its negation when that process leads its own group.
    if unsafe { libc::kill(target, signal) } == 0 {
        return Ok(());
    }
    match std::io::Error::last_os_error() {
        // Gone in the meantime: what we wanted.
        e if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        e => Err(e),
    }
}
