//! The standard `process_*` metrics every Prometheus exporter gives (the
//! names and meanings of the Go and Python clients): resident and virtual
//! memory, CPU seconds, open and allowed file descriptors, start time.
//! Read from `/proc/self` at each scrape, on Linux; where there is no
//! `/proc` they are simply absent. A metric that cannot be read is left
//! out, never reported as 0.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// `/proc`'s unit of CPU time and start time: `USER_HZ`, 100 on every
/// Linux architecture mnemo builds for (the kernel's ABI for these files;
/// the Prometheus Go client's procfs assumes the same).
const USER_HZ: f64 = 100.0;

#[derive(Debug)]
pub(super) struct ProcessCollector;

/// What one scrape read; each `None` when it could not be read.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    start_time: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = read();
        if let Some(cpu) = s.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            let help = "Total user and system CPU time spent in seconds";
            counter.encode(encoder.encode_descriptor("process_cpu_seconds", help, None, counter.metric_type())?)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                s.start_time,
            ),
            ("process_open_fds", "Number of open file descriptors", s.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", s.max_fds),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
            }
        }
        Ok(())
    }
}

fn read() -> Sample {
    let text = |path: &str| std::fs::read_to_string(path).ok();
    let mut sample = text("/proc/self/stat").map(|s| from_stat(&s)).unwrap_or_default();
    let boot = text("/proc/stat").and_then(|s| field(&s, "btime"));
    sample.start_time = sample.start_time.zip(boot).map(|(since_boot, boot)| boot + since_boot);
    sample.resident_bytes = text("/proc/self/status")
        .and_then(|s| field(&s, "VmRSS:"))
        .map(|kb| kb * 1024.0);
    sample.open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64);
    sample.max_fds = text("/proc/self/limits").and_then(|s| max_open_files(&s));
    sample
}

/// From `/proc/self/stat`: CPU seconds, virtual size, and the start time
/// in seconds after boot (the caller adds the boot time).
fn from_stat(stat: &str) -> Sample {
    // The command name (field 2) is in parentheses and may hold spaces:
    // the fields after its closing one are counted from field 3.
    let fields: Vec<&str> = match stat.rfind(')') {
        Some(end) => stat[end + 1..].split_whitespace().collect(),
        None => return Sample::default(),
    };
    let at = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    Sample {
        cpu_seconds: at(14).zip(at(15)).map(|(user, system)| (user + system) / USER_HZ),
        start_time: at(22).map(|ticks| ticks / USER_HZ),
        virtual_bytes: at(23),
        ..Sample::default()
    }
}

/// The number after `key` on the line that starts with it.
fn field(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The soft limit on the `Max open files` line of `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<f64> {
    let rest = limits.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 12345 104857600 2000 18446744073709551615";
        let s = from_stat(stat);
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.start_time, Some(123.45));
        assert_eq!(s.virtual_bytes, Some(104_857_600.0));
        assert_eq!(from_stat("garbage"), Sample::default());
    }

    #[test]
    fn the_soft_open_files_limit_and_status_fields_are_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024.0));
        assert_eq!(field("Name:\tmnemo\nVmRSS:\t   20480 kB\n", "VmRSS:"), Some(20480.0));
        assert_eq!(field("btime 1700000000\n", "btime"), Some(1_700_000_000.0));
    }
}
