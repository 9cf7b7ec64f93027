//! A process's CPU time and peak memory as Linux's `/proc` counts them:
//! `mnemo bench` reads its own (`"self"`), `benches/run_load.rs` the
//! `mnemo run` it started (its pid). `None` where `/proc` is missing or
//! says something else.

use std::time::Duration;

/// User and system CPU time of a process, all its threads so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTimes {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTimes {
    pub fn total(self) -> Duration {
        self.user + self.system
    }
}

impl std::ops::Sub for CpuTimes {
    type Output = CpuTimes;
    fn sub(self, before: CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(before.user),
            system: self.system.saturating_sub(before.system),
        }
    }
}

/// `/proc/<process>/stat`'s `utime` and `stime` (in clock ticks of 1/100 s,
/// Linux's fixed `USER_HZ`); `process` is a pid or `"self"`.
pub fn cpu_times(process: &str) -> Option<CpuTimes> {
    let stat = std::fs::read_to_string(format!("/proc/{process}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after `)` are
    // plain: the state first, utime the 12th, stime the 13th (man 5 proc).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)?
            .parse::<u64>()
            .ok()
            .map(|t| Duration::from_millis(t * 10))
    };
    Some(CpuTimes {
        user: ticks(11)?,
        system: ticks(12)?,
    })
}

/// The peak resident set of a process (`VmHWM` in
/// `/proc/<process>/status`), in KiB.
pub fn peak_rss_kb(process: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{process}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.split_whitespace().next()?.parse().ok()
}
