//! What the process uses, read from Linux's /proc (by the `procfs` crate) at each scrape under
//! the names Prometheus' own clients give them (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), so a dashboard shows the orchestrator's CPU and memory
//! from its own `/metrics`. Elsewhere than on Linux there is no /proc, and these are left out.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

#[derive(Debug)]
pub struct Process;

/// One reading of the process, each figure absent when /proc would not give it.
#[derive(Debug, Default, PartialEq)]
struct Reading {
    cpu_seconds: Option<f64>,
    threads: Option<i64>,
    start_time_seconds: Option<f64>,
    resident_bytes: Option<i64>,
    open_fds: Option<i64>,
}

#[cfg(target_os = "linux")]
fn read() -> Reading {
    let Ok(me) = procfs::process::Process::myself() else { return Reading::default() };
    let ticks = procfs::ticks_per_second() as f64;
    let stat = me.stat().ok();
    let boot = procfs::boot_time_secs().ok();
    Reading {
        cpu_seconds: stat.as_ref().map(|s| (s.utime + s.stime) as f64 / ticks),
        threads: stat.as_ref().map(|s| s.num_threads),
        start_time_seconds: stat.as_ref().zip(boot).map(|(s, boot)| boot as f64 + s.starttime as f64 / ticks),
        resident_bytes: me.status().ok().and_then(|s| s.vmrss).map(|kib| kib as i64 * 1024),
        open_fds: me.fd_count().ok().map(|n| n as i64),
    }
}

#[cfg(not(target_os = "linux"))]
fn read() -> Reading {
    Reading::default()
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let r = read();
        if let Some(seconds) = r.cpu_seconds {
            let cpu = ConstCounter::new(seconds);
            let help = "CPU time the process has used, user and system, in seconds";
            cpu.encode(encoder.encode_descriptor("process_cpu_seconds", help, None, cpu.metric_type())?)?;
        }
        let gauges = [
            ("process_threads", "Threads of the process", r.threads.map(|t| t as f64)),
            (
                "process_start_time_seconds",
                "When the process started, in seconds since the epoch",
                r.start_time_seconds,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory of the process, in bytes",
                r.resident_bytes.map(|b| b as f64),
            ),
            (
                "process_open_fds",
                "File descriptors the process has open (connections among them)",
                r.open_fds.map(|n| n as f64),
            ),
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

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_measured() {
        let r = super::read();
        assert!(r.cpu_seconds.is_some_and(|s| s >= 0.0), "{r:?}");
        assert!(r.threads.is_some_and(|t| t >= 1), "{r:?}");
        assert!(r.resident_bytes.is_some_and(|b| b > 1024 * 1024), "{r:?}");
        assert!(r.open_fds.is_some_and(|n| n >= 3), "{r:?}");
        let text = crate::metrics::Metrics::new().encode();
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_threads",
            "process_start_time_seconds",
        ] {
            assert!(text.lines().any(|l| l.starts_with(&format!("{name} "))), "no {name} in\n{text}");
        }
    }
}
