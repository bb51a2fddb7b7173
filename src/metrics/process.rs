//! The process's own CPU, memory, threads and file descriptors, read from `/proc/self` on each
//! scrape, under the names every Prometheus client library uses (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), so dashboards and alerts written for any other
//! exporter apply to mimeo as they are.
//!
//! What is counted is mimeo's own process: a plugin's compile runs in a child process of its own
//! (`plugin::compiler`), whose CPU and memory are not in these numbers, only in the container's.
//! Parsing is pure and tested from text; reading happens only in [`Process::encode`]. Where there
//! is no `/proc` (not Linux), nothing is exported.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Why `/proc` could not be read as expected.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("reading {path}: {source}")]
    Read {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} does not read as expected: {what}")]
    Format { path: &'static str, what: &'static str },
}

/// What `/proc/self/stat` says, in the kernel's units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Clock ticks in user and in system mode.
    pub user_ticks: u64,
    pub system_ticks: u64,
    pub threads: u64,
    /// Clock ticks after boot at which the process started.
    pub start_ticks: u64,
    pub virtual_bytes: u64,
    pub resident_pages: u64,
}

/// Parses `/proc/self/stat` (proc(5)). The second field, the command, is in parentheses and may
/// itself hold spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Result<Stat, ProcError> {
    let format = |what| ProcError::Format {
        path: "/proc/self/stat",
        what,
    };
    let (_, after_command) = text
        .rsplit_once(')')
        .ok_or_else(|| format("no command in parentheses"))?;
    // Field 3 (state) is the first after the command; field n is at index n - 3.
    let fields: Vec<&str> = after_command.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, ProcError> {
        fields
            .get(n - 3)
            .ok_or_else(|| format("fewer fields than proc(5) lists"))?
            .parse()
            .map_err(|_| format("a numeric field is not a number"))
    };
    Ok(Stat {
        user_ticks: field(14)?,
        system_ticks: field(15)?,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The boot time (seconds since the epoch) from `/proc/stat`'s `btime` line.
pub fn parse_boot_time(text: &str) -> Result<u64, ProcError> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|t| t.trim().parse().ok())
        .ok_or(ProcError::Format {
            path: "/proc/stat",
            what: "no btime line",
        })
}

/// One reading, in the units Prometheus names: seconds and bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub threads: u64,
    pub start_time_seconds: f64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
}

/// The machine's constants a reading is converted with.
#[derive(Clone, Copy, Debug)]
pub struct Units {
    pub ticks_per_second: u64,
    pub page_size: u64,
    pub boot_time: u64,
}

impl Reading {
    pub fn new(stat: &Stat, units: Units, open_fds: u64, max_fds: Option<u64>) -> Reading {
        let ticks = units.ticks_per_second.max(1) as f64;
        Reading {
            cpu_seconds: (stat.user_ticks + stat.system_ticks) as f64 / ticks,
            resident_bytes: stat.resident_pages * units.page_size,
            virtual_bytes: stat.virtual_bytes,
            threads: stat.threads,
            start_time_seconds: units.boot_time as f64 + stat.start_ticks as f64 / ticks,
            open_fds,
            max_fds,
        }
    }
}

/// The collector registered with mimeo's registry (under no prefix).
#[derive(Debug, Default)]
pub struct Process;

impl Process {
    fn read() -> Result<Reading, ProcError> {
        let read = |path: &'static str| {
            std::fs::read_to_string(path).map_err(|source| ProcError::Read { path, source })
        };
        let stat = parse_stat(&read("/proc/self/stat")?)?;
        let units = Units {
            ticks_per_second: rustix::param::clock_ticks_per_second(),
            page_size: rustix::param::page_size() as u64,
            boot_time: parse_boot_time(&read("/proc/stat")?)?,
        };
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .map_err(|source| ProcError::Read {
                path: "/proc/self/fd",
                source,
            })?
            .count() as u64;
        let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        Ok(Reading::new(&stat, units, open_fds, max_fds))
    }
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(now) = Process::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(now.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                now.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                now.virtual_bytes as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                now.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                now.open_fds as f64,
            ),
            (
                "process_threads",
                "Number of OS threads in the process.",
                now.threads as f64,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        if let Some(max) = now.max_fds {
            let gauge = ConstGauge::new(max as f64);
            gauge.encode(encoder.encode_descriptor(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line as the kernel writes it, for a command whose name holds a space and a parenthesis.
    const STAT: &str = "4242 (tokio) runtime) S 1 4242 4242 0 -1 4194560 5338 0 0 0 \
                        250 130 0 0 20 0 17 0 9000 123456789 2048 18446744073709551615 1 1 0 0 \
                        0 0 0 4096 17987 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let stat = parse_stat(STAT).unwrap();
        assert_eq!(
            stat,
            Stat {
                user_ticks: 250,
                system_ticks: 130,
                threads: 17,
                start_ticks: 9000,
                virtual_bytes: 123_456_789,
                resident_pages: 2048,
            }
        );
        let units = Units {
            ticks_per_second: 100,
            page_size: 4096,
            boot_time: 1_700_000_000,
        };
        let reading = Reading::new(&stat, units, 12, Some(1024));
        assert_eq!(reading.cpu_seconds, 3.8);
        assert_eq!(reading.resident_bytes, 8 << 20);
        assert_eq!(reading.start_time_seconds, 1_700_000_090.0);
    }

    #[test]
    fn what_does_not_read_as_proc_is_an_error() {
        for bad in [
            "",
            "4242 tokio S 1",
            "4242 (tokio) S 1 2 3",
            &STAT.replace(" 250 ", " x "),
        ] {
            assert!(
                matches!(parse_stat(bad), Err(ProcError::Format { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n").unwrap(),
            1_700_000_000
        );
        assert!(parse_boot_time("cpu 1 2 3\n").is_err());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process_is_read_on_linux() {
        let now = Process::read().unwrap();
        assert!(
            now.resident_bytes > 0 && now.threads >= 1 && now.open_fds >= 1,
            "{now:?}"
        );
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            - now.start_time_seconds;
        assert!((0.0..86_400.0).contains(&started), "started {started} s ago");
    }
}
