//! The command line of `envtest`, parsed into plain values. Pure: it reads no files and starts
//! nothing, so every way of calling it wrong is a unit test.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage:
  envtest up      --state-dir DIR [--crds FILE]...
  envtest start   --state-dir DIR [--crds FILE]... [--log FILE] [--timeout SECS]
  envtest spawn   --pid-file FILE --log FILE [--wait-tcp HOST:PORT] [--timeout SECS] -- PROGRAM [ARG]...
  envtest stop    (--state-dir DIR | --pid-file FILE)...
  envtest running (--state-dir DIR | --pid-file FILE)

commands:
  up        start a local etcd + kube-apiserver and keep it running, in the foreground, until
            SIGTERM or SIGINT; writes DIR/kubeconfig, DIR/envtest.pid and, last, DIR/ready
  start     run `envtest up` detached (a session of its own, output to the log) and wait until
            DIR/ready appears; prints the kubeconfig path on stdout. If it fails, times out or a
            signal arrives first, stops it and prints the log's last lines
  spawn     run PROGRAM detached the same way, with this environment, and record it in the pid
            file; with --wait-tcp, wait until HOST:PORT accepts a connection
  stop      SIGTERM to each recorded process that still runs the program recorded, SIGKILL
            after 20 s; prints `stopped NAME (pid N)` for each, nothing when none runs
  running   print the pid and exit 0 if the recorded process runs, else exit 1

options:
  --state-dir DIR   a control plane's state directory (created if missing); for stop and running,
                    the envtest whose pid is in DIR/envtest.pid
  --crds FILE       a YAML file whose CustomResourceDefinitions are installed before ready is
                    written; may be repeated
  --log FILE        where the detached process's stdout and stderr go (start: DIR/envtest.log)
  --timeout SECS    how long to wait (start: 120, spawn: 60)
  --pid-file FILE   where spawn records the process (its pid on the first line), and what stop
                    and running read
  --wait-tcp ADDR   host:port that must accept a TCP connection before spawn returns
  -h, --help        print this help

The control-plane binaries come from MIMEO_ENVTEST_BIN_DIR, or are built on first use by
tests/support/build-control-plane.sh (several minutes: raise start's --timeout for that).";

pub const START_TIMEOUT: Duration = Duration::from_secs(120);
pub const SPAWN_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, PartialEq)]
pub enum Invocation {
    Up(Up),
    Start(Start),
    Spawn(Spawn),
    Stop(Vec<Target>),
    Running(Target),
    Help,
}

#[derive(Debug, PartialEq)]
pub struct Up {
    pub state_dir: PathBuf,
    pub crds: Vec<PathBuf>,
}

#[derive(Debug, PartialEq)]
pub struct Start {
    pub up: Up,
    pub log: Option<PathBuf>,
    pub timeout: Duration,
}

#[derive(Debug, PartialEq)]
pub struct Spawn {
    pub pid_file: PathBuf,
    pub log: PathBuf,
    /// `host:port`, resolved only when spawning.
    pub wait_tcp: Option<String>,
    pub timeout: Duration,
    pub program: OsString,
    pub args: Vec<OsString>,
}

/// What `stop` and `running` look at.
#[derive(Debug, PartialEq)]
pub enum Target {
    /// An `envtest up`, through the `envtest.pid` it writes into its state directory.
    StateDir(PathBuf),
    /// A process `spawn` recorded.
    PidFile(PathBuf),
}

#[derive(Clone, Copy, PartialEq)]
enum Command {
    Up,
    Start,
    Spawn,
    Stop,
    Running,
}

impl Command {
    fn name(self) -> &'static str {
        match self {
            Command::Up => "up",
            Command::Start => "start",
            Command::Spawn => "spawn",
            Command::Stop => "stop",
            Command::Running => "running",
        }
    }

    fn accepts(self, flag: &str) -> bool {
        let flags: &[&str] = match self {
            Command::Up => &["--state-dir", "--crds"],
            Command::Start => &["--state-dir", "--crds", "--log", "--timeout"],
            Command::Spawn => &["--pid-file", "--log", "--wait-tcp", "--timeout"],
            Command::Stop | Command::Running => &["--state-dir", "--pid-file"],
        };
        flags.contains(&flag)
    }
}

const COMMANDS: &str = "up, start, spawn, stop or running";

/// Every flag given, before each command checks what it needs.
#[derive(Default)]
struct Given {
    state_dirs: Vec<PathBuf>,
    pid_files: Vec<PathBuf>,
    crds: Vec<PathBuf>,
    log: Option<PathBuf>,
    timeout: Option<Duration>,
    wait_tcp: Option<String>,
    program: Vec<OsString>,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, String> {
    let mut args = args.into_iter();
    let command = match args.next() {
        None => return Err(format!("missing command: {COMMANDS}")),
        Some(command) => command.to_string_lossy().into_owned(),
    };
    let command = match command.as_str() {
        "up" => Command::Up,
        "start" => Command::Start,
        "spawn" => Command::Spawn,
        "stop" => Command::Stop,
        "running" => Command::Running,
        "-h" | "--help" | "help" => return Ok(Invocation::Help),
        other => return Err(format!("unknown command {other:?}: the commands are {COMMANDS}")),
    };
    let mut given = Given::default();
    while let Some(arg) = args.next() {
        if arg == "--" && command == Command::Spawn {
            given.program = args.by_ref().collect();
            break;
        }
        let text = arg.to_string_lossy().into_owned();
        let (flag, inline) = match text.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(OsString::from(value))),
            _ => (text.clone(), None),
        };
        if flag == "-h" || flag == "--help" {
            return Ok(Invocation::Help);
        }
        if !command.accepts(&flag) {
            return Err(format!(
                "unknown argument {text:?} for `envtest {}`",
                command.name()
            ));
        }
        let value = inline
            .or_else(|| args.next())
            .ok_or_else(|| format!("{flag} needs a value"))?;
        if value.is_empty() {
            return Err(format!("{flag} needs a non-empty value"));
        }
        let once = |already: bool| {
            if already {
                Err(format!("{flag} given twice"))
            } else {
                Ok(())
            }
        };
        match flag.as_str() {
            "--state-dir" => given.state_dirs.push(value.into()),
            "--pid-file" => given.pid_files.push(value.into()),
            "--crds" => given.crds.push(value.into()),
            "--log" => {
                once(given.log.is_some())?;
                given.log = Some(value.into());
            }
            "--timeout" => {
                once(given.timeout.is_some())?;
                given.timeout = Some(seconds(&value.to_string_lossy())?);
            }
            "--wait-tcp" => {
                once(given.wait_tcp.is_some())?;
                given.wait_tcp = Some(host_port(&value.to_string_lossy())?);
            }
            _ => return Err(format!("unknown argument {text:?}")),
        }
    }
    build(command, given)
}

fn build(command: Command, given: Given) -> Result<Invocation, String> {
    let Given {
        state_dirs,
        pid_files,
        crds,
        log,
        timeout,
        wait_tcp,
        program,
    } = given;
    match command {
        Command::Up | Command::Start => {
            let up = Up {
                state_dir: one(state_dirs, "--state-dir DIR")?,
                crds,
            };
            Ok(match command {
                Command::Up => Invocation::Up(up),
                _ => Invocation::Start(Start {
                    up,
                    log,
                    timeout: timeout.unwrap_or(START_TIMEOUT),
                }),
            })
        }
        Command::Spawn => {
            let pid_file = one(pid_files, "--pid-file FILE")?;
            let log = log.ok_or("--log FILE is required")?;
            let mut program = program.into_iter();
            let Some(name) = program.next().filter(|name| !name.is_empty()) else {
                return Err("missing the program: spawn ... -- PROGRAM [ARG]...".into());
            };
            Ok(Invocation::Spawn(Spawn {
                pid_file,
                log,
                wait_tcp,
                timeout: timeout.unwrap_or(SPAWN_TIMEOUT),
                program: name,
                args: program.collect(),
            }))
        }
        Command::Stop | Command::Running => {
            let mut targets: Vec<Target> = state_dirs.into_iter().map(Target::StateDir).collect();
            targets.extend(pid_files.into_iter().map(Target::PidFile));
            match (command, targets.len()) {
                (Command::Stop, 0) => Err("stop needs --state-dir DIR or --pid-file FILE".into()),
                (Command::Stop, _) => Ok(Invocation::Stop(targets)),
                (_, 1) => Ok(Invocation::Running(targets.remove(0))),
                _ => Err("running takes one --state-dir DIR or --pid-file FILE".into()),
            }
        }
    }
}

/// The value of a flag that must be given exactly once; `what` is the flag with its placeholder.
fn one(mut values: Vec<PathBuf>, what: &str) -> Result<PathBuf, String> {
    let flag = what.split(' ').next().unwrap_or(what);
    match values.len() {
        0 => Err(format!("{what} is required")),
        1 => Ok(values.remove(0)),
        _ => Err(format!("{flag} given twice")),
    }
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|secs| *secs > 0.0)
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| format!("--timeout needs a number of seconds above 0, not {text:?}"))
}

/// Checks the shape `host:port` (with `[v6]:port` allowed); resolving the host waits for spawn.
fn host_port(text: &str) -> Result<String, String> {
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0) => {
            Ok(text.to_owned())
        }
        _ => Err(format!(
            "--wait-tcp needs HOST:PORT, such as 127.0.0.1:8080, not {text:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_up_with_state_dir_and_repeated_crds() {
        assert_eq!(
            parse(args(&[
                "up",
                "--state-dir",
                ".demo",
                "--crds",
                "a.yaml",
                "--crds=b.yaml"
            ])),
            Ok(Invocation::Up(Up {
                state_dir: ".demo".into(),
                crds: vec!["a.yaml".into(), "b.yaml".into()],
            }))
        );
        assert_eq!(
            parse(args(&["up", "--state-dir=/tmp/x"])),
            Ok(Invocation::Up(Up {
                state_dir: "/tmp/x".into(),
                crds: vec![]
            }))
        );
    }

    #[test]
    fn parses_start_with_defaults_and_options() {
        assert_eq!(
            parse(args(&["start", "--state-dir", "d"])),
            Ok(Invocation::Start(Start {
                up: Up {
                    state_dir: "d".into(),
                    crds: vec![]
                },
                log: None,
                timeout: START_TIMEOUT,
            }))
        );
        assert_eq!(
            parse(args(&[
                "start",
                "--crds",
                "c.yaml",
                "--state-dir=d",
                "--log",
                "d.log",
                "--timeout",
                "2.5"
            ])),
            Ok(Invocation::Start(Start {
                up: Up {
                    state_dir: "d".into(),
                    crds: vec!["c.yaml".into()]
                },
                log: Some("d.log".into()),
                timeout: Duration::from_millis(2500),
            }))
        );
    }

    #[test]
    fn parses_spawn_and_leaves_the_programs_arguments_alone() {
        assert_eq!(
            parse(args(&[
                "spawn",
                "--pid-file",
                "m.pid",
                "--log=m.log",
                "--wait-tcp",
                "127.0.0.1:18080",
                "--",
                "/bin/mimeo",
                "run",
                "--help",
                "--",
            ])),
            Ok(Invocation::Spawn(Spawn {
                pid_file: "m.pid".into(),
                log: "m.log".into(),
                wait_tcp: Some("127.0.0.1:18080".into()),
                timeout: SPAWN_TIMEOUT,
                program: "/bin/mimeo".into(),
                args: args(&["run", "--help", "--"]),
            }))
        );
        assert_eq!(
            parse(args(&[
                "spawn",
                "--pid-file=p",
                "--log=l",
                "--wait-tcp=[::1]:80",
                "--timeout=3",
                "--",
                "x"
            ])),
            Ok(Invocation::Spawn(Spawn {
                pid_file: "p".into(),
                log: "l".into(),
                wait_tcp: Some("[::1]:80".into()),
                timeout: Duration::from_secs(3),
                program: "x".into(),
                args: vec![],
            }))
        );
    }

    #[test]
    fn parses_stop_and_running_targets() {
        assert_eq!(
            parse(args(&[
                "stop",
                "--state-dir",
                "a",
                "--pid-file",
                "m.pid",
                "--state-dir=b"
            ])),
            Ok(Invocation::Stop(vec![
                Target::StateDir("a".into()),
                Target::StateDir("b".into()),
                Target::PidFile("m.pid".into()),
            ]))
        );
        assert_eq!(
            parse(args(&["running", "--pid-file", "m.pid"])),
            Ok(Invocation::Running(Target::PidFile("m.pid".into())))
        );
        assert_eq!(
            parse(args(&["running", "--state-dir", "a"])),
            Ok(Invocation::Running(Target::StateDir("a".into())))
        );
    }

    #[test]
    fn help() {
        assert_eq!(parse(args(&["--help"])), Ok(Invocation::Help));
        assert_eq!(parse(args(&["help"])), Ok(Invocation::Help));
        assert_eq!(parse(args(&["up", "-h"])), Ok(Invocation::Help));
        assert_eq!(parse(args(&["stop", "--help"])), Ok(Invocation::Help));
    }

    #[test]
    fn refuses_bad_invocations() {
        for (list, message) in [
            (&[][..], "missing command"),
            (&["down"][..], "unknown command"),
            (&["up"][..], "--state-dir DIR is required"),
            (&["up", "--state-dir"][..], "--state-dir needs a value"),
            (&["up", "--state-dir="][..], "non-empty"),
            (&["up", "--state-dir", "a", "--state-dir", "b"][..], "given twice"),
            (&["up", "--state-dir", "a", "--crds"][..], "--crds needs a value"),
            (&["up", "--state-dir", "a", "--verbose"][..], "unknown argument"),
            (
                &["up", "--state-dir", "a", "--log", "l"][..],
                "unknown argument \"--log\" for `envtest up`",
            ),
            (&["start"][..], "--state-dir DIR is required"),
            (&["start", "--state-dir", "a", "--timeout", "0"][..], "above 0"),
            (&["start", "--state-dir", "a", "--timeout", "-1"][..], "above 0"),
            (&["start", "--state-dir", "a", "--timeout", "soon"][..], "above 0"),
            (&["start", "--state-dir", "a", "--timeout", "inf"][..], "above 0"),
            (
                &["start", "--state-dir", "a", "--log", "x", "--log", "y"][..],
                "--log given twice",
            ),
            (&["start", "--pid-file", "p"][..], "unknown argument"),
            (
                &["spawn", "--log", "l", "--", "x"][..],
                "--pid-file FILE is required",
            ),
            (
                &["spawn", "--pid-file", "p", "--", "x"][..],
                "--log FILE is required",
            ),
            (
                &["spawn", "--pid-file", "p", "--log", "l"][..],
                "missing the program",
            ),
            (
                &["spawn", "--pid-file", "p", "--log", "l", "--"][..],
                "missing the program",
            ),
            (
                &["spawn", "--pid-file", "p", "--log", "l", "x"][..],
                "unknown argument \"x\"",
            ),
            (
                &[
                    "spawn",
                    "--pid-file",
                    "p",
                    "--pid-file",
                    "q",
                    "--log",
                    "l",
                    "--",
                    "x",
                ][..],
                "given twice",
            ),
            (
                &[
                    "spawn",
                    "--pid-file",
                    "p",
                    "--log",
                    "l",
                    "--wait-tcp",
                    "8080",
                    "--",
                    "x",
                ][..],
                "HOST:PORT",
            ),
            (
                &[
                    "spawn",
                    "--pid-file",
                    "p",
                    "--log",
                    "l",
                    "--wait-tcp",
                    "h:http",
                    "--",
                    "x",
                ][..],
                "HOST:PORT",
            ),
            (
                &[
                    "spawn",
                    "--pid-file",
                    "p",
                    "--log",
                    "l",
                    "--wait-tcp",
                    ":80",
                    "--",
                    "x",
                ][..],
                "HOST:PORT",
            ),
            (&["spawn", "--state-dir", "d"][..], "unknown argument"),
            (&["stop"][..], "stop needs --state-dir DIR or --pid-file FILE"),
            (&["stop", "--"][..], "unknown argument \"--\""),
            (&["running"][..], "running takes one"),
            (
                &["running", "--state-dir", "a", "--pid-file", "b"][..],
                "running takes one",
            ),
        ] {
            let error = parse(args(list)).expect_err(&format!("{list:?} should be refused"));
            assert!(error.contains(message), "{list:?}: {error:?} lacks {message:?}");
        }
    }
}
