//! Child processes that cannot outlive the test process.
//!
//! `Drop` kills and reaps them in the ordinary case, panics included. For the case where the test
//! process itself is killed, each child asks the kernel for SIGKILL when its parent thread exits
//! (`PR_SET_PDEATHSIG`). Because that signal follows the spawning *thread*, children are spawned
//! from one thread that lives as long as the process, not from a test's thread.

use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `command` so that it dies with the test process.
pub(crate) fn spawn_tied(command: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("envtest-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(spawn_with_death_signal(&mut command));
                }
            })
            .expect("spawning the envtest spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send((command, reply_tx))
        .map_err(|_| std::io::Error::other("envtest spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("envtest spawner thread dropped the request"))?
}

#[allow(unsafe_code)]
fn spawn_with_death_signal(command: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), which is
    // async-signal-safe; it allocates nothing and touches no locks.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

/// A child process that is killed and reaped when dropped.
pub(crate) struct Reaped {
    pub name: &'static str,
    pub child: Child,
}

impl Reaped {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited, with its status if so.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
