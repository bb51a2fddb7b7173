//! `envtest start` and `envtest spawn`: a program started detached, in a session of its own (so
//! the terminal's Ctrl-C and hang-up do not reach it) with its output in a log, and waited for
//! until it is ready. What must never happen here: returning with a child left running that was
//! given up on. On a failure, a timeout or SIGINT/SIGTERM while waiting, the child is stopped
//! before the command exits.

use crate::args::{Spawn, Start};
use crate::pid_file::{self, Record};
use crate::shutdown::Shutdown;
use crate::{stop, up};
use std::ffi::OsStr;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many of the log's last lines a failure shows.
const LOG_TAIL: usize = 25;
const POLL: Duration = Duration::from_millis(100);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);

/// `envtest start`: `envtest up` detached; prints the kubeconfig's path once `ready` appears.
pub async fn start(start: Start) -> Result<(), String> {
    let dir = &start.up.state_dir;
    up::check_crds(&start.up.crds)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("creating the state directory {}: {e}", dir.display()))?;
    let (pid_path, program) = pid_file::locate(&crate::args::Target::StateDir(dir.clone()));
    if let Some(record) = pid_file::read(&pid_path, &program)?
        && record.is_running()
    {
        return Err(format!(
            "an envtest (pid {}) already runs with state directory {}; stop it first: envtest stop --state-dir {}",
            record.pid,
            dir.display(),
            dir.display()
        ));
    }
    // A `ready` left by an envtest that was killed must not pass for the new one's.
    let ready = dir.join(up::READY);
    pid_file::remove(&ready)?;

    let exe = std::env::current_exe().map_err(|e| format!("finding this program's path: {e}"))?;
    let mut shutdown = Shutdown::install()?;
    let mut args = vec!["up".into(), "--state-dir".into(), dir.clone().into_os_string()];
    for crds in &start.up.crds {
        args.extend(["--crds".into(), crds.clone().into_os_string()]);
    }
    let log = start.log.clone().unwrap_or_else(|| dir.join("envtest.log"));
    create_parent(&log)?;
    let mut child = spawn_detached(exe.as_os_str(), &args, &log)?;
    let name = format!("the control plane (envtest up, pid {})", child.id());
    let waited = wait(&mut child, &name, start.timeout, &mut shutdown, || ready.exists()).await;
    let elapsed = settle(&mut child, &program, &log, waited).await?;
    let kubeconfig = dir.join(up::KUBECONFIG);
    let absolute = kubeconfig.canonicalize().unwrap_or_else(|_| kubeconfig.clone());
    println!("{}", absolute.display());
    // One write, so that two `start`s side by side do not interleave their lines.
    let line = format!(
        "envtest: ready after {:.1} s (pid {}); kubeconfig: {}\n",
        elapsed.as_secs_f64(),
        child.id(),
        kubeconfig.display()
    );
    eprint!("{line}");
    Ok(())
}

/// `envtest spawn`: any program detached, recorded in a pid file, optionally waited for until it
/// accepts TCP connections.
pub async fn spawn(spawn: Spawn) -> Result<(), String> {
    let program = Path::new(&spawn.program)
        .file_name()
        .unwrap_or(&spawn.program)
        .to_string_lossy()
        .into_owned();
    if let Some(record) = pid_file::read(&spawn.pid_file, &program)?
        && record.is_running()
    {
        return Err(format!(
            "{} (pid {}) from {} is still running; stop it first: envtest stop --pid-file {}",
            record.program,
            record.pid,
            spawn.pid_file.display(),
            spawn.pid_file.display()
        ));
    }
    let addrs = match &spawn.wait_tcp {
        None => None,
        Some(addr) => {
            let addrs: Vec<SocketAddr> = addr
                .to_socket_addrs()
                .map_err(|e| format!("--wait-tcp {addr}: {e}"))?
                .collect();
            // Otherwise whatever listens there would pass for the new program.
            if accepts(&addrs) {
                return Err(format!("something already listens on {addr}"));
            }
            Some(addrs)
        }
    };
    create_parent(&spawn.pid_file)?;
    create_parent(&spawn.log)?;

    let mut shutdown = Shutdown::install()?;
    let mut child = spawn_detached(&spawn.program, &spawn.args, &spawn.log)?;
    let name = format!("{program} (pid {})", child.id());
    // Recorded at once, so that `stop` finds it even if this command is killed while waiting.
    if let Err(e) = pid_file::write(&spawn.pid_file, &Record::of(child.id(), &program)) {
        let stopped = stop_child(&mut child, &program).await.unwrap_or_default();
        return Err(format!("{e}; {stopped}"));
    }
    let Some(addrs) = addrs else {
        eprintln!("envtest: started {name}");
        return Ok(());
    };
    let waited = wait(&mut child, &name, spawn.timeout, &mut shutdown, || {
        accepts(&addrs)
    })
    .await;
    match settle(&mut child, &program, &spawn.log, waited).await {
        Ok(elapsed) => {
            let addr = spawn.wait_tcp.as_deref().unwrap_or_default();
            let secs = elapsed.as_secs_f64();
            eprintln!("envtest: {name} accepts connections on {addr} after {secs:.1} s");
            Ok(())
        }
        Err(e) => {
            let _ = pid_file::remove(&spawn.pid_file);
            Err(e)
        }
    }
}

/// Starts `program` in a new session, stdin from /dev/null, stdout and stderr to `log`
/// (truncated), with this process's environment.
#[allow(unsafe_code)]
fn spawn_detached(program: &OsStr, args: &[std::ffi::OsString], log: &Path) -> Result<Child, String> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::File::create(log).map_err(|e| format!("creating the log {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("opening the log {}: {e}", log.display()))?;
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: the closure runs in the forked child before exec and only calls setsid(2), which is
    // async-signal-safe; it allocates nothing and touches no locks. It cannot fail here: the
    // child of a fork is never a process group leader.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
        .spawn()
        .map_err(|e| format!("starting {}: {e}", Path::new(program).display()))
}

fn create_parent(path: &Path) -> Result<(), String> {
    match path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        Some(parent) => {
            std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))
        }
        None => Ok(()),
    }
}

/// Whether any of the addresses accepts a TCP connection.
fn accepts(addrs: &[SocketAddr]) -> bool {
    addrs
        .iter()
        .any(|addr| TcpStream::connect_timeout(addr, CONNECT_TIMEOUT).is_ok())
}

/// Why waiting ended without the child being ready.
enum Unready {
    /// Stop the child, and show the log: something went wrong.
    Failed(String),
    /// Stop the child; the user asked for it, the log has nothing to say.
    Signal(&'static str),
}

/// Waits until `ready()` holds, the child exits, `timeout` passes or a signal arrives (`shutdown`
/// was installed before the child was spawned); returns how long it took.
async fn wait(
    child: &mut Child,
    name: &str,
    timeout: Duration,
    shutdown: &mut Shutdown,
    mut ready: impl FnMut() -> bool,
) -> Result<Duration, Unready> {
    let started = Instant::now();
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            signal = shutdown.recv() => return Err(Unready::Signal(signal)),
            _ = tick.tick() => {
                // Exited first: a `ready` that outlived its process proves nothing.
                match child.try_wait() {
                    Ok(Some(status)) => return Err(Unready::Failed(format!("{name} exited ({status}) before it was ready"))),
                    Ok(None) => {}
                    Err(e) => return Err(Unready::Failed(format!("watching {name}: {e}"))),
                }
                if ready() {
                    return Ok(started.elapsed());
                }
                if started.elapsed() >= timeout {
                    let secs = timeout.as_secs_f64();
                    return Err(Unready::Failed(format!("{name} was not ready after {secs} s")));
                }
            }
        }
    }
}

/// After [`wait`]: on success the elapsed time; otherwise stops the child, and fails with the
/// reason and, unless a signal was the reason, the log's last lines.
async fn settle(
    child: &mut Child,
    program: &str,
    log: &Path,
    waited: Result<Duration, Unready>,
) -> Result<Duration, String> {
    let unready = match waited {
        Ok(elapsed) => return Ok(elapsed),
        Err(unready) => unready,
    };
    let stopped = match stop_child(child, program).await {
        Some(said) => format!("; {said}"),
        None => String::new(),
    };
    match unready {
        Unready::Signal(signal) => Err(format!("{signal} while waiting{stopped}")),
        Unready::Failed(message) => Err(format!("{message}{stopped}\n{}", log_tail(log))),
    }
}

/// Stops our own child (SIGTERM, then SIGKILL after the grace period) and reaps it; says how, or
/// nothing when it had exited already.
async fn stop_child(child: &mut Child, program: &str) -> Option<String> {
    let record = Record::of(child.id(), program);
    let said = if record.is_running() {
        Some(stop::terminate(std::slice::from_ref(&record)).await.join("; "))
    } else {
        None
    };
    let _ = child.try_wait();
    said
}

fn log_tail(log: &Path) -> String {
    let text = match std::fs::read(log) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return format!("(reading the log {}: {e})", log.display()),
    };
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return format!("--- {} is empty ---", log.display());
    }
    let mut out = format!("--- last lines of {} ---", log.display());
    for line in &lines[lines.len().saturating_sub(LOG_TAIL)..] {
        out.push('\n');
        out.push_str(line);
    }
    out
}
